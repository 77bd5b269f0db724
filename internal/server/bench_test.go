package server

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// Benchmarks of the live server over loopback TCP with the generated Go
// client: the empty unary RPC (health Check) is the ceiling each figure is
// read against, measured in the same run. bench/load.sh does the same with
// ghz, whose dynamic-message client is much slower at large responses.

func text200Envelope(b *testing.B) []byte {
	ec, err := codec.NewRegistry().Encode(codec.TypeText, strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5)[:200])
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := proto.Marshal(ec)
	return raw
}

func BenchmarkGRPCEmptyUnary(b *testing.B) {
	client := healthpb.NewHealthClient(startTCP(b, Config{}))
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkGRPCDecodeText200(b *testing.B) {
	benchDecodeText200(b, cb.NewContentServiceClient(startTCP(b, Config{})))
}

// benchDecodeText200 decodes a 200-byte text through client, 8 callers a
// core.
func benchDecodeText200(b *testing.B, client cb.ContentServiceClient) {
	req := &cb.DecodeRequest{EncodedContent: text200Envelope(b)}
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Decode(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkGRPCDecodeBatch1000(b *testing.B) {
	benchDecodeBatch(b, nil)
}

// BenchmarkGRPCDecodeBatch1000Preview is the same batch with a preview of
// each message: the ratio to BenchmarkGRPCDecodeBatch1000 is what
// previews cost (target: under 1.2).
func BenchmarkGRPCDecodeBatch1000Preview(b *testing.B) {
	benchDecodeBatch(b, &cb.PreviewOptions{})
}

// BenchmarkGRPCDecodeBatch1000ServerOnly and its Preview twin are the
// same calls with a client that keeps the response's bytes rather than
// unmarshalling them: the server's and the transport's share, without the
// caller's protobuf work on the same two cores.
func BenchmarkGRPCDecodeBatch1000ServerOnly(b *testing.B) {
	benchDecodeBatchRaw(b, nil)
}

func BenchmarkGRPCDecodeBatch1000PreviewServerOnly(b *testing.B) {
	benchDecodeBatchRaw(b, &cb.PreviewOptions{})
}

// BenchmarkGRPCDecodeBatchMixedPage and its Preview twin are a page of
// 1,000 messages of a chat rather than 1,000 copies of the worst case:
// texts of 8 to 280 bytes (60%), reactions (15%), replies (8%), read
// receipts (7%), remote attachments (5%), group updates (3%), markdown
// (2%). Reactions, read receipts and group updates never push, so their
// previews are empty.
func BenchmarkGRPCDecodeBatchMixedPage(b *testing.B) {
	benchDecodeBatchOf(b, mixedPage(b, nil))
}

func BenchmarkGRPCDecodeBatchMixedPagePreview(b *testing.B) {
	benchDecodeBatchOf(b, mixedPage(b, &cb.PreviewOptions{}))
}

// BenchmarkGRPCDecodeBatchDeepReplies and its Preview twin are 1,000
// replies nested to the limit around 2 KiB of text: the worst case for
// previews, whose text was cut once a level (26-34 times the CPU of the
// same call without previews). Target: previews within 2 times (a rate
// ratio of at least 0.5).
func BenchmarkGRPCDecodeBatchDeepReplies(b *testing.B) {
	benchDecodeBatchWith(b, deepReplies(b, nil), 1)
}

func BenchmarkGRPCDecodeBatchDeepRepliesPreview(b *testing.B) {
	benchDecodeBatchWith(b, deepReplies(b, &cb.PreviewOptions{}), 1)
}

func deepReplies(b *testing.B, preview *cb.PreviewOptions) *cb.DecodeBatchRequest {
	reg := codec.NewRegistry()
	nested := mustEncodeEC(b, reg, codec.TypeText, strings.Repeat("a reply's text, ", 128))
	for range reg.MaxNestingDepth() - 1 {
		nested = mustEncodeEC(b, reg, codec.TypeReply, &codec.Reply{Reference: "ab", Content: nested})
	}
	raw := mustMarshalB(b, nested)
	req := &cb.DecodeBatchRequest{Preview: preview}
	for range 1000 {
		req.EncodedContents = append(req.EncodedContents, raw)
	}
	return req
}

func mixedPage(b *testing.B, preview *cb.PreviewOptions) *cb.DecodeBatchRequest {
	reg := codec.NewRegistry()
	encode := func(t codec.TypeID, v any) []byte {
		ec, err := reg.Encode(t, v)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := proto.Marshal(ec)
		return raw
	}
	sentence := strings.Repeat("See you at the station at seven, and bring the tickets please. ", 5)
	lengths := []int{8, 16, 24, 32, 40, 48, 64, 96, 140, 280}
	reply := encode(codec.TypeReply, &codec.Reply{Reference: "ab", Content: mustEncodeEC(b, reg, codec.TypeText, "On my way, ten minutes.")})
	reaction := encode(codec.TypeReaction, &ct.ReactionV2{Reference: "ab", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "👍", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE})
	receipt := encode(codec.TypeReadReceipt, &codec.ReadReceipt{})
	remote := encode(codec.TypeRemoteAttachment, &codec.RemoteAttachment{URL: "https://files.example/a", ContentDigest: strings.Repeat("ab", 32),
		Secret: make([]byte, 32), Salt: make([]byte, 32), Nonce: make([]byte, 12), Scheme: "https://", Filename: proto.String("IMG_2041.jpg")})
	updated, _ := proto.Marshal(&mc.EncodedContent{Type: codec.TypeGroupUpdated.Proto(), Content: mustMarshalB(b, &mc.GroupUpdated{InitiatedByInboxId: "inbox-a"})})
	markdown := encode(codec.TypeMarkdown, "**Agenda**: tickets, *dinner*, and the `plan`.")
	req := &cb.DecodeBatchRequest{Preview: preview}
	for i := 0; i < 1000; i++ {
		var raw []byte
		switch r := i % 100; {
		case r < 60:
			raw = encode(codec.TypeText, sentence[:lengths[i%len(lengths)]])
		case r < 75:
			raw = reaction
		case r < 83:
			raw = reply
		case r < 90:
			raw = receipt
		case r < 95:
			raw = remote
		case r < 98:
			raw = updated
		default:
			raw = markdown
		}
		req.EncodedContents = append(req.EncodedContents, raw)
	}
	return req
}

func mustEncodeEC(b *testing.B, reg *codec.Registry, t codec.TypeID, v any) *mc.EncodedContent {
	ec, err := reg.Encode(t, v)
	if err != nil {
		b.Fatal(err)
	}
	return ec
}

func mustMarshalB(b *testing.B, m proto.Message) []byte {
	raw, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func decodeBatch1000(b *testing.B, preview *cb.PreviewOptions) *cb.DecodeBatchRequest {
	raw := text200Envelope(b)
	req := &cb.DecodeBatchRequest{Preview: preview}
	for i := 0; i < 1000; i++ {
		req.EncodedContents = append(req.EncodedContents, raw)
	}
	return req
}

func benchDecodeBatch(b *testing.B, preview *cb.PreviewOptions) {
	benchDecodeBatchOf(b, decodeBatch1000(b, preview))
}

func benchDecodeBatchOf(b *testing.B, req *cb.DecodeBatchRequest) {
	benchDecodeBatchWith(b, req, 8)
}

// benchDecodeBatchWith runs req from parallelism callers a core: a call
// of deep replies holds tens of megabytes of the memory budget, which
// eight callers a core would pass.
func benchDecodeBatchWith(b *testing.B, req *cb.DecodeBatchRequest, parallelism int) {
	client := cb.NewContentServiceClient(startTCP(b, Config{}))
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.DecodeBatch(context.Background(), req)
			if err != nil || len(resp.GetResults()) != 1000 {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "msgs/s")
}

func benchDecodeBatchRaw(b *testing.B, preview *cb.PreviewOptions) {
	conn := startTCP(b, Config{})
	req, err := proto.Marshal(decodeBatch1000(b, preview))
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var resp []byte
			if err := conn.Invoke(context.Background(), cb.ContentService_DecodeBatch_FullMethodName, req, &resp, grpc.ForceCodecV2(rawCodec{})); err != nil || len(resp) < 1000*200 {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkGRPCDecodeAttachment1MiB(b *testing.B) {
	client := cb.NewContentServiceClient(startTCP(b, Config{}))
	ec, err := codec.NewRegistry().Encode(codec.TypeAttachment, &codec.Attachment{MimeType: "application/octet-stream", Data: bytes.Repeat([]byte{7}, 1<<20)})
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := proto.Marshal(ec)
	req := &cb.DecodeRequest{EncodedContent: raw}
	b.SetBytes(int64(len(raw)))
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Decode(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
