package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// Benchmarks of ConversationService over loopback TCP on each engine, and
// beside them Postgres's own COPY FROM and COPY TO of the same rows in the
// same run: the ceilings the store figures are read against. Each op moves
// benchBatch messages of a 200-byte text envelope; msgs/s is the figure.

const benchBatch = 10_000

// benchMessages is batch op of a conversation: later batches are sent
// later, as in a live group.
func benchMessages(op int, group []byte, content []byte) []*mb.GroupMessageSave {
	msgs := storetest.Messages(fmt.Sprintf("op%06d", op), group, benchBatch, int64(op*benchBatch))
	for _, m := range msgs {
		m.DecryptedMessageBytes = content
		m.SenderInstallationId = []byte("installation-0123456789abcdef012")
		m.SequenceId, m.OriginatorId = &m.SentAtNs, &m.SentAtNs
	}
	return msgs
}

// benchEngines runs fn on each engine twice: over gRPC on loopback TCP
// ("grpc"), and calling the service in process ("direct": validation,
// store and decode without the transport and the client's decoding).
func benchEngines(b *testing.B, fn func(b *testing.B, c cb.ConversationServiceClient, s store.Store)) {
	for _, e := range enginetest.Engines() {
		b.Run(e.Name+"/grpc", func(b *testing.B) {
			s := e.Open(b)
			conn := startTCP(b, Config{Store: s})
			fn(b, cb.NewConversationServiceClient(conn), s)
		})
		b.Run(e.Name+"/direct", func(b *testing.B) {
			s := e.Open(b)
			fn(b, directClient{NewConversationService(s, codec.NewRegistry(), ConversationOptions{})}, s)
		})
	}
}

// directClient calls the service in process, through the client interface.
type directClient struct{ s *ConversationService }

func (d directClient) PutGroup(ctx context.Context, in *cb.PutGroupRequest, _ ...grpc.CallOption) (*cb.PutGroupResponse, error) {
	return d.s.PutGroup(ctx, in)
}
func (d directClient) GetGroup(ctx context.Context, in *cb.GetGroupRequest, _ ...grpc.CallOption) (*cb.GetGroupResponse, error) {
	return d.s.GetGroup(ctx, in)
}
func (d directClient) ListGroups(ctx context.Context, in *cb.ListGroupsRequest, _ ...grpc.CallOption) (*cb.ListGroupsResponse, error) {
	return d.s.ListGroups(ctx, in)
}
func (d directClient) AppendMessages(ctx context.Context, in *cb.AppendMessagesRequest, _ ...grpc.CallOption) (*cb.AppendMessagesResponse, error) {
	return d.s.AppendMessages(ctx, in)
}
func (d directClient) ListMessages(ctx context.Context, in *cb.ListMessagesRequest, _ ...grpc.CallOption) (*cb.ListMessagesResponse, error) {
	return d.s.ListMessages(ctx, in)
}
func (d directClient) StreamMessages(context.Context, *cb.StreamMessagesRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[cb.StreamMessagesResponse], error) {
	return nil, errors.New("StreamMessages is benchmarked over gRPC only: a stream needs the transport")
}
func (d directClient) DeleteMessage(ctx context.Context, in *cb.DeleteMessageRequest, _ ...grpc.CallOption) (*cb.DeleteMessageResponse, error) {
	return d.s.DeleteMessage(ctx, in)
}
func (d directClient) SetConsent(ctx context.Context, in *cb.SetConsentRequest, _ ...grpc.CallOption) (*cb.SetConsentResponse, error) {
	return d.s.SetConsent(ctx, in)
}
func (d directClient) ListConsent(ctx context.Context, in *cb.ListConsentRequest, _ ...grpc.CallOption) (*cb.ListConsentResponse, error) {
	return d.s.ListConsent(ctx, in)
}
func (d directClient) ActivateGroup(ctx context.Context, in *cb.ActivateGroupRequest, _ ...grpc.CallOption) (*cb.ActivateGroupResponse, error) {
	return d.s.ActivateGroup(ctx, in)
}

func reportRate(b *testing.B, perOp int) {
	b.ReportMetric(float64(perOp)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkAppendMessages appends a batch of new messages per op.
func BenchmarkAppendMessages(b *testing.B) {
	content := text200Envelope(b)
	benchEngines(b, func(b *testing.B, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("bench")
		if _, err := c.PutGroup(context.Background(), &cb.PutGroupRequest{Owner: owner, Group: storetest.MinimalGroup("g")}); err != nil {
			b.Fatal(err)
		}
		batches := make([][]*mb.GroupMessageSave, b.N)
		for i := range batches {
			batches[i] = benchMessages(i, storetest.GroupID("g"), content)
		}
		b.ResetTimer()
		for i := range b.N {
			resp, err := c.AppendMessages(context.Background(), &cb.AppendMessagesRequest{Owner: owner, Messages: batches[i]})
			if err != nil || resp.GetInserted() != benchBatch {
				b.Fatalf("append: %v, %v", resp.GetInserted(), err)
			}
		}
		reportRate(b, benchBatch)
	})
}

// benchGroup stores group "g" of benchBatch messages of content and
// returns its owner.
func benchGroup(b *testing.B, c cb.ConversationServiceClient, content []byte) string {
	owner := storetest.Owner("bench")
	ctx := context.Background()
	if _, err := c.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: storetest.MinimalGroup("g")}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: benchMessages(0, storetest.GroupID("g"), content)}); err != nil {
		b.Fatal(err)
	}
	return owner
}

// BenchmarkListMessages lists a group of benchBatch messages, decoded, in
// pages of 1,000, per op.
func BenchmarkListMessages(b *testing.B) {
	content := text200Envelope(b)
	benchEngines(b, func(b *testing.B, c cb.ConversationServiceClient, _ store.Store) {
		owner, ctx := benchGroup(b, c, content), context.Background()
		b.ResetTimer()
		for range b.N {
			n := 0
			req := &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageSize: 1000}
			for {
				resp, err := c.ListMessages(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range resp.GetMessages() {
					if m.GetDecoded().GetContent() == nil {
						b.Fatal("not decoded")
					}
				}
				n += len(resp.GetMessages())
				if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
					break
				}
			}
			if n != benchBatch {
				b.Fatalf("listed %d", n)
			}
		}
		reportRate(b, benchBatch)
	})
}

// BenchmarkStreamMessages reads the same group as BenchmarkListMessages
// in one StreamMessages call (responses of 1,000), over gRPC only: the
// stream is the transport's.
func BenchmarkStreamMessages(b *testing.B) {
	content := text200Envelope(b)
	for _, e := range enginetest.Engines() {
		b.Run(e.Name+"/grpc", func(b *testing.B) {
			c := cb.NewConversationServiceClient(startTCP(b, Config{Store: e.Open(b)}))
			owner, ctx := benchGroup(b, c, content), context.Background()
			b.ResetTimer()
			for range b.N {
				stream, err := c.StreamMessages(ctx, &cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g")})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					resp, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					for _, m := range resp.GetMessages() {
						if m.GetDecoded().GetContent() == nil {
							b.Fatal("not decoded")
						}
					}
					n += len(resp.GetMessages())
				}
				if n != benchBatch {
					b.Fatalf("streamed %d", n)
				}
			}
			reportRate(b, benchBatch)
		})
	}
}

// BenchmarkClientDecodePage is the share of ListMessages and
// StreamMessages over gRPC that no server can make cheaper: a Go client's
// proto.Unmarshal of a page of 1,000 of the benchmark's messages, as the
// server sends it, into a new response, as a generated client does. With
// COPY TO beside it, it bounds what the paged call can reach: reading a
// page and decoding it happen one after the other (benchratio -serial).
func BenchmarkClientDecodePage(b *testing.B) {
	c := directClient{NewConversationService(enginetest.SQLite(b), codec.NewRegistry(), ConversationOptions{})}
	owner := benchGroup(b, c, text200Envelope(b))
	page, err := c.ListMessages(context.Background(), &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageSize: 1000})
	if err != nil || len(page.GetMessages()) != 1000 {
		b.Fatalf("page of %d: %v", len(page.GetMessages()), err)
	}
	wire, err := proto.Marshal(page)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(wire)))
	for b.Loop() {
		var resp cb.ListMessagesResponse
		if err := proto.Unmarshal(wire, &resp); err != nil || len(resp.Messages) != 1000 {
			b.Fatalf("decoded %d: %v", len(resp.Messages), err)
		}
	}
	reportRate(b, 1000)
}

// copyColumns are the messages table's columns in CopyFrom order.
var copyColumns = []string{"owner", "id", "group_id", "decrypted_message_bytes", "sent_at_ns", "kind",
	"sender_installation_id", "sender_inbox_id", "delivery_status", "content_type_save", "version_major",
	"version_minor", "authority_id", "reference_id", "sequence_id", "originator_id", "content_type",
	"expires_at_ns", "expiry_known"}

func postgresForBench(b *testing.B) (*postgres.Store, string) {
	s := enginetest.Postgres(b).(*postgres.Store)
	owner := storetest.Owner("bench")
	if _, err := s.PutGroup(context.Background(), owner, storetest.MinimalGroup("g")); err != nil {
		b.Fatal(err)
	}
	return s, owner
}

// BenchmarkPostgresCopyFrom is the ceiling of append: the same rows into
// the same table (same indexes, same foreign key) by COPY FROM STDIN.
func BenchmarkPostgresCopyFrom(b *testing.B) {
	s, owner := postgresForBench(b)
	content := text200Envelope(b)
	rows := make([][][]any, b.N)
	for i := range rows {
		for _, m := range benchMessages(i, storetest.GroupID("g"), content) {
			rows[i] = append(rows[i], append([]any{owner}, store.MessageArgs(m)...))
		}
	}
	b.ResetTimer()
	for i := range b.N {
		n, err := s.Pool().CopyFrom(context.Background(), pgx.Identifier{"messages"}, copyColumns, pgx.CopyFromRows(rows[i]))
		if err != nil || n != benchBatch {
			b.Fatalf("copy from: %d, %v", n, err)
		}
	}
	reportRate(b, benchBatch)
}

// BenchmarkPostgresCopyTo is the ceiling of listing: the same rows, in the
// same order, out by COPY TO STDOUT (binary), read and discarded.
func BenchmarkPostgresCopyTo(b *testing.B) {
	s, owner := postgresForBench(b)
	if _, err := s.AppendMessages(context.Background(), owner, benchMessages(0, storetest.GroupID("g"), text200Envelope(b)), store.AppendOptions{}); err != nil {
		b.Fatal(err)
	}
	conn, err := s.Pool().Acquire(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	query := fmt.Sprintf(`COPY (SELECT %s FROM messages WHERE owner = '%s' AND group_id = '\x67' ORDER BY sent_at_ns, id) TO STDOUT (FORMAT binary)`,
		store.MessageColumns, owner)
	b.ResetTimer()
	for range b.N {
		if _, err := conn.Conn().PgConn().CopyTo(context.Background(), io.Discard, query); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, benchBatch)
}
