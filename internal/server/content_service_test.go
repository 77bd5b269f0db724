package server

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// testAdminToken proves the operator principal startTCP's clients use.
const testAdminToken = "test-admin-token"

// adminPolicy is a policy whose one principal holds every scope for every
// owner, proven by testAdminToken.
func adminPolicy(t testing.TB) *auth.Authenticator {
	t.Helper()
	return policyAuth(t, `
principals:
  - name: test-admin
    tokens_sha256: [`+auth.TokenDigest(testAdminToken)+`]
    scopes: [admin]
    owners: ["*"]
`)
}

func policyAuth(t testing.TB, yaml string) *auth.Authenticator {
	t.Helper()
	p, err := auth.ParsePolicy([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(auth.StaticPolicy(p), nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// serveTCP serves a real server on a loopback TCP port until the test
// ends and returns its address. Without cfg.Auth it proves callers with
// adminPolicy.
func serveTCP(t testing.TB, cfg Config, log *zap.Logger) string {
	t.Helper()
	if cfg.Auth == nil {
		cfg.Auth = adminPolicy(t)
	}
	if log == nil {
		log = zap.NewNop()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(cfg, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// dial connects to addr as a client configured by o; the connection
// closes when the test ends.
func dial(t testing.TB, addr string, o transport.ClientOptions) *grpc.ClientConn {
	t.Helper()
	opts, err := transport.DialOptions(o)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startTCP serves a real server on a loopback TCP port and returns a
// client connection to it as the test operator; the server stops when the
// test ends.
func startTCP(t testing.TB, cfg Config) *grpc.ClientConn {
	t.Helper()
	addr := serveTCP(t, cfg, nil)
	return dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
}

func wantCode(t *testing.T, err error, code codes.Code, mentions string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || !strings.Contains(st.Message(), mentions) {
		t.Errorf("got %v %q; want %v mentioning %q", st.Code(), st.Message(), code, mentions)
	}
}

func TestE2EEncodeDecodeReaction(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{}))
	ctx := context.Background()
	reaction := &ct.ReactionV2{Reference: "abc", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "👍", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE}
	enc, err := c.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Reaction{Reaction: reaction}}}})
	if err != nil {
		t.Fatal(err)
	}
	// REFERENCE.md's reaction 2.0 vector.
	want := "0a160a08786d74702e6f726712087265616374696f6e18021a295265616374656420776974682022f09f918d2220746f20616e206561726c696572206d657373616765220f0a0361626318012204f09f918d2801"
	if got := hex.EncodeToString(enc.GetEncodedContent()); got != want {
		t.Errorf("encoded %s\nwant    %s", got, want)
	}
	if enc.GetContentType() != "xmtp.org/reaction:2.0" || enc.ShouldPush == nil || enc.GetShouldPush() || enc.GetDeletable() {
		t.Errorf("metadata: %v", enc)
	}
	dec, err := c.Decode(ctx, &cb.DecodeRequest{EncodedContent: enc.GetEncodedContent()})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(dec.GetContent().GetReaction(), reaction) || dec.GetContentType() != "xmtp.org/reaction:2.0" || dec.GetFallback() != `Reacted with "👍" to an earlier message` {
		t.Errorf("decoded %v", dec)
	}
}

func TestE2EEncodeCompression(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{}))
	ctx := context.Background()
	text := strings.Repeat("compressible ", 200)
	for _, alg := range []mc.Compression{mc.Compression_COMPRESSION_DEFLATE, mc.Compression_COMPRESSION_GZIP} {
		enc, err := c.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: text}}}, Compression: alg.Enum()})
		if err != nil {
			t.Fatal(err)
		}
		if enc.GetEnvelope().Compression == nil || enc.GetEnvelope().GetCompression() != alg || len(enc.GetEnvelope().GetContent()) >= len(text) {
			t.Errorf("%v: not compressed: %v", alg, enc.GetEnvelope().Compression)
		}
		dec, err := c.Decode(ctx, &cb.DecodeRequest{EncodedContent: enc.GetEncodedContent()})
		if err != nil || dec.GetContent().GetText() != text {
			t.Errorf("%v: round trip lost the text: %v", alg, err)
		}
	}
	enc, err := c.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: text}}}})
	if err != nil {
		t.Fatal(err)
	}
	if enc.GetEnvelope().Compression != nil || string(enc.GetEnvelope().GetContent()) != text {
		t.Errorf("compressed without being asked (CTYPE-031): %v, %d content bytes for %d of text", enc.GetEnvelope().Compression, len(enc.GetEnvelope().GetContent()), len(text))
	}
}

func TestE2EEncodeCustomAndErrors(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{}))
	ctx := context.Background()
	custom := &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 1}, Content: []byte("?"), Fallback: proto.String("A poll")}
	enc, err := c.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Custom{Custom: custom}})
	if err != nil {
		t.Fatal(err)
	}
	if enc.ShouldPush != nil || enc.GetDeletable() || enc.GetContentType() != "example.com/poll:1.0" {
		t.Errorf("custom metadata %v", enc)
	}
	dec, err := c.Decode(ctx, &cb.DecodeRequest{EncodedContent: enc.GetEncodedContent()})
	if err != nil {
		t.Fatal(err)
	}
	if u := dec.GetUndecoded(); u.GetKind() != cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC || !bytes.Equal(u.GetEncodedContent(), enc.GetEncodedContent()) || u.GetFallback() != "A poll" {
		t.Errorf("custom decode %v", dec)
	}

	for name, tc := range map[string]struct {
		req      *cb.EncodeRequest
		mentions string
	}{
		"no input":             {&cb.EncodeRequest{}, "input"},
		"empty content":        {&cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{}}}, "content"},
		"group updated":        {&cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_GroupUpdated{GroupUpdated: &mc.GroupUpdated{}}}}}, "decode only"},
		"membership":           {&cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_GroupMembershipChange{GroupMembershipChange: &mc.GroupMembershipChanges{}}}}}, "decode only"},
		"edit":                 {&cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_EditMessage{EditMessage: &ct.EditMessage{}}}}}, "reserved"},
		"legacy reaction":      {&cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_LegacyReaction{LegacyReaction: &ct.ReactionV2{}}}}}, "CTYPE-022"},
		"reaction ref":         {&cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Reaction{Reaction: &ct.ReactionV2{}}}}}, "reaction.reference"},
		"custom untyped":       {&cb.EncodeRequest{Input: &cb.EncodeRequest_Custom{Custom: &mc.EncodedContent{Content: []byte("x")}}}, "custom: encode failed: type: absent"},
		"custom bad text":      {&cb.EncodeRequest{Input: &cb.EncodeRequest_Custom{Custom: &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "xmtp.org", TypeId: "text", VersionMajor: 1}, Parameters: map[string]string{"encoding": "UTF-16"}}}}, "parameters.encoding"},
		"custom transcript":    {&cb.EncodeRequest{Input: &cb.EncodeRequest_Custom{Custom: &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "xmtp.org", TypeId: "group_updated", VersionMajor: 1}}}}, "never published"},
		"double compress":      {&cb.EncodeRequest{Input: &cb.EncodeRequest_Custom{Custom: &mc.EncodedContent{Type: custom.Type, Compression: mc.Compression_COMPRESSION_GZIP.Enum()}}, Compression: mc.Compression_COMPRESSION_GZIP.Enum()}, "already compressed"},
		"bad compression":      {&cb.EncodeRequest{Input: &cb.EncodeRequest_Custom{Custom: custom}, Compression: mc.Compression(9).Enum()}, "compression"},
		"nested reply untyped": {&cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Reply{Reply: &cb.Reply{Reference: "ab", Nested: &cb.Reply_Encoded{Encoded: &mc.EncodedContent{}}}}}}}, "reply.content.type"},
	} {
		_, err := c.Encode(ctx, tc.req)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.mentions) {
			t.Errorf("%s: %v %q; want InvalidArgument mentioning %q", name, st.Code(), st.Message(), tc.mentions)
		}
	}
}

func TestE2EDecodeAnyBytes(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{}))
	for _, b := range [][]byte{nil, {0}, {0xff, 0xff}, []byte("hello"), bytes.Repeat([]byte{0x0a}, 1000)} {
		dec, err := c.Decode(context.Background(), &cb.DecodeRequest{EncodedContent: b})
		if err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		if u := dec.GetUndecoded(); u == nil || !bytes.Equal(u.GetEncodedContent(), b) {
			t.Errorf("%x: %v", b, dec)
		}
	}
}

func TestE2EDecodeBatch(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{MaxDecodeBatch: 3}))
	ctx := context.Background()
	text, _ := c.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: "one"}}}})
	md, _ := c.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Markdown{Markdown: "*two*"}}}})
	resp, err := c.DecodeBatch(ctx, &cb.DecodeBatchRequest{EncodedContents: [][]byte{text.GetEncodedContent(), []byte("junk"), md.GetEncodedContent()}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	if len(r) != 3 || r[0].GetContent().GetText() != "one" || r[1].GetUndecoded() == nil || r[2].GetContent().GetMarkdown() != "*two*" {
		t.Errorf("batch outcomes %v", r)
	}
	_, err = c.DecodeBatch(ctx, &cb.DecodeBatchRequest{EncodedContents: make([][]byte, 4)})
	wantCode(t, err, codes.InvalidArgument, "batch limit of 3")
}

func TestE2ERequestSizeLimit(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{MaxRecvBytes: 1 << 20}))
	_, err := c.Decode(context.Background(), &cb.DecodeRequest{EncodedContent: make([]byte, 2<<20)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized request: %v", err)
	}
}

func TestE2EAttachmentCrypto(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{}))
	ctx := context.Background()
	att := &cb.Attachment{Filename: proto.String("cat.png"), MimeType: "image/png", Data: bytes.Repeat([]byte{7}, 5000)}
	enc, err := c.EncryptAttachment(ctx, &cb.EncryptAttachmentRequest{Attachment: att, Url: "https://files.example.com/cat"})
	if err != nil {
		t.Fatal(err)
	}
	ra := enc.GetRemoteAttachment()
	if ra.GetUrl() != "https://files.example.com/cat" || ra.GetScheme() != "https://" || int(ra.GetContentLength()) != len(enc.GetPayload()) || ra.GetFilename() != "cat.png" {
		t.Errorf("remote attachment %v", ra)
	}
	// The remote attachment encodes as content as it is.
	if _, err := c.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_RemoteAttachment{RemoteAttachment: ra}}}}); err != nil {
		t.Errorf("encode the returned remote attachment: %v", err)
	}
	dec, err := c.DecryptAttachment(ctx, &cb.DecryptAttachmentRequest{Payload: enc.GetPayload(), RemoteAttachment: ra})
	if err != nil || !proto.Equal(dec.GetAttachment(), att) {
		t.Fatalf("decrypt: %v", err)
	}
	tampered := append([]byte(nil), enc.GetPayload()...)
	tampered[10] ^= 1
	_, err = c.DecryptAttachment(ctx, &cb.DecryptAttachmentRequest{Payload: tampered, RemoteAttachment: ra})
	wantCode(t, err, codes.InvalidArgument, "digest")
	if reason(err) != "DIGEST_MISMATCH" {
		t.Errorf("reason %q", reason(err))
	}
	wrong := proto.Clone(ra).(*cb.RemoteAttachment)
	wrong.Secret = bytes.Repeat([]byte{1}, 32)
	_, err = c.DecryptAttachment(ctx, &cb.DecryptAttachmentRequest{Payload: enc.GetPayload(), RemoteAttachment: wrong})
	wantCode(t, err, codes.InvalidArgument, "authentication")
	if reason(err) != "AUTHENTICATION_FAILED" {
		t.Errorf("reason %q", reason(err))
	}
	_, err = c.EncryptAttachment(ctx, &cb.EncryptAttachmentRequest{Attachment: att, Url: "http://files.example.com/cat"})
	wantCode(t, err, codes.InvalidArgument, "url")
	_, err = c.EncryptAttachment(ctx, &cb.EncryptAttachmentRequest{})
	wantCode(t, err, codes.InvalidArgument, "attachment")
	_, err = c.EncryptAttachment(ctx, &cb.EncryptAttachmentRequest{Attachment: &cb.Attachment{}})
	wantCode(t, err, codes.InvalidArgument, "mime_type")
	bad := proto.Clone(ra).(*cb.RemoteAttachment)
	bad.Url, bad.Scheme = "http://evil.example/x", "http"
	_, err = c.DecryptAttachment(ctx, &cb.DecryptAttachmentRequest{Payload: enc.GetPayload(), RemoteAttachment: bad})
	wantCode(t, err, codes.InvalidArgument, "remote_attachment")
	_, err = c.DecryptAttachment(ctx, &cb.DecryptAttachmentRequest{Payload: enc.GetPayload()})
	wantCode(t, err, codes.InvalidArgument, "remote_attachment")
}

func reason(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func TestE2EHealthAndReflection(t *testing.T) {
	conn := startTCP(t, Config{})
	ctx := context.Background()
	for _, svc := range []string{"", "contentbackup.v1.ContentService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, resp, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, ","), "contentbackup.v1.ContentService") {
		t.Errorf("reflection lists %v", names)
	}
}

// TestE2EDecodeBatchExpansionBudget: each envelope is capped at 16 MiB
// decompressed, so a batch of small bombs must be capped as a whole. A
// 16 MiB text costs 64 MiB of the budget (its decompressed chunks and
// their join, the decoded string, its response): two fit in 130 MiB,
// three do not.
func TestE2E_CTYPE025_DecodeBatchExpansionBudget(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{MaxBatchExpanded: 130 << 20}))
	ctx := context.Background()
	enc, err := c.Encode(ctx, &cb.EncodeRequest{
		Input:       &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: strings.Repeat("a", 16<<20)}}},
		Compression: mc.Compression_COMPRESSION_DEFLATE.Enum(),
	})
	if err != nil {
		t.Fatal(err)
	}
	bomb := enc.GetEncodedContent()
	if len(bomb) > 1<<20 {
		t.Fatalf("compressed 16 MiB is %d bytes", len(bomb))
	}
	resp, err := c.DecodeBatch(ctx, &cb.DecodeBatchRequest{EncodedContents: [][]byte{bomb, bomb}})
	if err != nil || len(resp.GetResults()[1].GetContent().GetText()) != 16<<20 {
		t.Fatalf("two within the budget: %v", err)
	}
	_, err = c.DecodeBatch(ctx, &cb.DecodeBatchRequest{EncodedContents: [][]byte{bomb, bomb, bomb}})
	wantCode(t, err, codes.ResourceExhausted, "encoded_contents[2]")
}
