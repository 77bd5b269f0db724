package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// streamAll reads a StreamMessages call to its end: its responses, or the
// error that ended it.
func streamAll(t *testing.T, c cb.ConversationServiceClient, req *cb.StreamMessagesRequest, opts ...grpc.CallOption) ([]*cb.StreamMessagesResponse, error) {
	t.Helper()
	stream, err := c.StreamMessages(t.Context(), req, opts...)
	if err != nil {
		return nil, err
	}
	var out []*cb.StreamMessagesResponse
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, resp)
	}
}

func streamed(resps []*cb.StreamMessagesResponse) []*cb.StoredMessage {
	var out []*cb.StoredMessage
	for _, r := range resps {
		out = append(out, r.GetMessages()...)
	}
	return out
}

func sameMessages(t *testing.T, what string, got, want []*cb.StoredMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: message %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestE2EStreamMessages_ARCH009_CTYPE008: StreamMessages sends exactly
// what paging through ListMessages returns (decoded, undecodable content
// kept, CTYPE-008), in responses of at most page_size; a response's
// resume_token continues the stream in either call; the window is
// ARCH-009's (start, end].
func TestE2EStreamMessages_ARCH009_CTYPE008(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("stream")
		g := storetest.FullGroup("g")
		put(t, c, owner, g)
		msgs := storetest.Messages("m", g.Id, 2500, 1)
		for i, m := range msgs {
			switch i % 3 {
			case 0:
				m.DecryptedMessageBytes = textEnvelope(t, fmt.Sprintf("hello %d", i))
			case 1:
				m.DecryptedMessageBytes = []byte("\xff not an envelope")
			}
		}
		appendMsgs(t, c, owner, msgs...)
		want := listAll(t, c, owner, g.Id)

		all, err := streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: g.Id})
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, "page size 0", streamed(all), want)
		if len(all) != 3 || all[0].GetResumeToken() == "" || all[2].GetResumeToken() != "" {
			t.Errorf("page size 0: %d responses; want 1000, 1000, 500 with a token on all but the last", len(all))
		}

		small, err := streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: g.Id, PageSize: 300})
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, "page size 300", streamed(small), want)
		if len(small) != 9 {
			t.Errorf("page size 300: %d responses, want 9", len(small))
		}
		for i, r := range small {
			if n := len(r.GetMessages()); n > 300 || (i < len(small)-1 && n != 300) {
				t.Errorf("page size 300: response %d holds %d messages", i, n)
			}
		}

		// Resuming after response 2 (900 messages): in ListMessages and in
		// StreamMessages.
		token := small[2].GetResumeToken()
		page, err := c.ListMessages(t.Context(), &cb.ListMessagesRequest{Owner: owner, GroupId: g.Id, PageToken: token, PageSize: 5})
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, "ListMessages from a resume token", page.GetMessages(), want[900:905])
		rest, err := streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: g.Id, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, "StreamMessages from a resume token", streamed(rest), want[900:])
		// And a ListMessages token continues a stream.
		page, err = c.ListMessages(t.Context(), &cb.ListMessagesRequest{Owner: owner, GroupId: g.Id, PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		rest, err = streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: g.Id, PageToken: page.GetNextPageToken()})
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, "StreamMessages from a page token", streamed(rest), want[10:])

		// ARCH-009: (start, end]; messages are sent at 1..2500.
		window, err := streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: g.Id, StartNs: proto.Int64(100), EndNs: proto.Int64(1600), PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		sameMessages(t, "window (100, 1600]", streamed(window), want[100:1600])
		// A token of one window does not continue another.
		_, err = streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: g.Id, PageToken: window[0].GetResumeToken()})
		wantCode(t, err, codes.InvalidArgument, "page_token")

		// An empty group: one empty response. A missing one: NOT_FOUND.
		put(t, c, owner, storetest.MinimalGroup("empty"))
		empty, err := streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("empty")})
		if err != nil || len(empty) != 1 || len(empty[0].GetMessages()) != 0 || empty[0].GetResumeToken() != "" {
			t.Errorf("empty group: %v, %v", empty, err)
		}
		_, err = streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: []byte("missing")})
		wantCode(t, err, codes.NotFound, "")
	})
}

// TestE2EStreamMessagesBadInput: every malformed request is
// INVALID_ARGUMENT naming its field, before anything is read.
func TestE2EStreamMessagesBadInput(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("bad")
		put(t, c, owner, storetest.MinimalGroup("g"))
		for _, tc := range []struct {
			req      *cb.StreamMessagesRequest
			mentions string
		}{
			{&cb.StreamMessagesRequest{GroupId: storetest.GroupID("g")}, "owner"},
			{&cb.StreamMessagesRequest{Owner: owner}, "group_id"},
			{&cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageSize: -1}, "page_size"},
			{&cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageSize: 1001}, "page_size"},
			{&cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), StartNs: proto.Int64(5), EndNs: proto.Int64(4)}, "start_ns"},
			{&cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageToken: "forged"}, "page_token"},
		} {
			_, err := streamAll(t, c, tc.req)
			wantCode(t, err, codes.InvalidArgument, tc.mentions)
		}
	})
}

// TestE2EStreamMessagesPageBytes: a response holds no more than the page
// byte limit, except a single message larger than it, which comes alone.
func TestE2EStreamMessagesPageBytes(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("bytes")
		putPageBytesGroup(t, c, owner)
		resps, err := streamAll(t, c, &cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g")}, grpc.MaxCallRecvMsgSize(64<<20))
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int
		for _, r := range resps {
			sizes = append(sizes, len(r.GetMessages()))
			if n := len(r.GetMessages()); n > 1 && proto.Size(r) > DefaultLimits.ListPageBytes {
				t.Errorf("a response of %d messages is %d bytes, over the %d-byte page limit", n, proto.Size(r), DefaultLimits.ListPageBytes)
			}
		}
		if got := len(streamed(resps)); got != 13 || sizes[0] != 2 || sizes[len(sizes)-1] != 1 {
			t.Errorf("responses of %v messages; want 13, two a response, the 5 MiB one alone", sizes)
		}
	})
}

// TestE2EStreamMessagesStalledClient: a client that opens a stream and
// reads nothing costs the server at most the pages in its pipeline, not
// the conversation, and past the idle timeout the stream ends
// (DEADLINE_EXCEEDED) and its goroutines with it.
func TestE2EStreamMessagesStalledClient(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := &readCounter{Store: e.Open(t)}
			conn := startTCP(t, Config{Store: s, Limits: Limits{StreamIdleTimeout: 2 * time.Second}})
			c := cb.NewConversationServiceClient(conn)
			owner := storetest.Owner("stall")
			// 96 messages of 1 MiB, not envelopes: 192 MiB of responses,
			// two messages (4 MiB) a page.
			putLargeMessages(t, c, owner, 12, 8, 1<<20)
			var before, during runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			stream, err := c.StreamMessages(t.Context(), &cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g")}, grpc.MaxCallRecvMsgSize(64<<20))
			if err != nil {
				t.Fatal(err)
			}
			first, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			// Read nothing while the server fills its pipeline: until its
			// reads from the store stop (no read in half a second), not for
			// a fixed time a loaded machine may not fill it in.
			for last, still := int64(-1), 0; still < 5; time.Sleep(100 * time.Millisecond) {
				if n := s.read.Load(); n != last {
					last, still = n, 0
				} else {
					still++
				}
			}
			if n := s.read.Load(); n >= 48 {
				t.Errorf("a stalled stream's server read %d of 96 messages from the store", n)
			}
			runtime.GC()
			runtime.ReadMemStats(&during)
			// Server: three pages (4 MiB each) of responses; the transport's
			// flow-control windows on both sides (at most 16 MiB on loopback
			// after BDP estimation); the client's one response. An unbounded
			// server would hold all 192 MiB.
			grew := int64(during.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("a stalled stream holds %.1f MiB", float64(grew)/(1<<20))
			if grew > 48<<20 {
				t.Errorf("a stalled stream holds %d MiB", grew>>20)
			}
			// Stalled well past the idle timeout, so that a loaded machine
			// filling the pipeline slowly still reaches it.
			time.Sleep(5 * time.Second)
			got := len(first.GetMessages())
			for err == nil {
				var r *cb.StreamMessagesResponse
				r, err = stream.Recv()
				got += len(r.GetMessages())
			}
			wantCode(t, err, codes.DeadlineExceeded, "read nothing")
			if got >= 96 {
				t.Errorf("a stalled stream sent all %d messages", got)
			}
			if n := pageReadersLeft(); n > 0 {
				t.Errorf("%d page readers still run after the stream ended", n)
			}
			if !eventually.Within(5*time.Second, func() bool { return eventually.Goroutines("server.startSender") == 0 }) {
				t.Errorf("%d stream senders still run after the stream ended", eventually.Goroutines("server.startSender"))
			}
		})
	}
}

// TestReliabilityHeldMessageStreams: StreamMessages calls whose clients
// read one response and then nothing, each on a connection of its own.
// Past an owner's limit of message streams, and past the server's, a call
// is refused with RESOURCE_EXHAUSTED at once. The admitted ones hold at
// most their pipelines (three pages, the transport's windows) until the
// idle timeout ends them, and then their slots are free again.
func TestReliabilityHeldMessageStreams(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			limits := Limits{StreamIdleTimeout: 2 * time.Second, MaxMessageStreams: 4, MaxMessageStreamsPerOwner: 3}
			addr := serveTCP(t, Config{Store: e.Open(t), Limits: limits}, nil)
			connect := func() cb.ConversationServiceClient {
				return cb.NewConversationServiceClient(dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken}))
			}
			setup := connect()
			// Each owner's group is 12 messages of 1 MiB, one a response:
			// more than a stream's pipeline and windows hold, so a client
			// that stops reading keeps its stream open.
			a, b := storetest.Owner("held-a"), storetest.Owner("held-b")
			for _, owner := range []string{a, b} {
				putLargeMessages(t, setup, owner, 3, 4, 1<<20)
			}
			req := func(owner string) *cb.StreamMessagesRequest {
				return &cb.StreamMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageSize: 1}
			}
			// hold opens a stream and reads its first response only.
			hold := func(owner string) (grpc.ServerStreamingClient[cb.StreamMessagesResponse], error) {
				stream, err := connect().StreamMessages(t.Context(), req(owner))
				if err == nil {
					_, err = stream.Recv()
				}
				return stream, err
			}
			h := sampleHeap()
			var held []grpc.ServerStreamingClient[cb.StreamMessagesResponse]
			for i := range 3 {
				stream, err := hold(a)
				if err != nil {
					t.Fatalf("owner a, stream %d: %v", i, err)
				}
				held = append(held, stream)
			}
			_, err := hold(a)
			wantCode(t, err, codes.ResourceExhausted, "3 message streams are open for this owner")
			stream, err := hold(b)
			if err != nil {
				t.Fatalf("owner b, the fourth stream in all: %v", err)
			}
			held = append(held, stream)
			_, err = hold(b)
			wantCode(t, err, codes.ResourceExhausted, "4 message streams are open, the server's limit")
			growth := h.growth()
			t.Logf("4 held message streams, 2 refused: peak heap growth %.1f MiB", float64(growth)/mib)
			// Per stream, in this one process: the server's three pages and
			// the sender's, and the client's 4 MiB stream window.
			if growth > 64*mib {
				t.Errorf("4 held streams grew the heap by %.0f MiB", float64(growth)/mib)
			}
			// Read nothing past the idle timeout: each held stream ends
			// DEADLINE_EXCEEDED with what it had buffered, short of its group.
			time.Sleep(limits.StreamIdleTimeout + 3*time.Second)
			for i, stream := range held {
				got := 1
				for {
					r, err := stream.Recv()
					if err != nil {
						wantCode(t, err, codes.DeadlineExceeded, "read nothing")
						break
					}
					got += len(r.GetMessages())
				}
				if got >= 12 {
					t.Errorf("held stream %d sent all %d messages", i, got)
				}
			}
			// Their slots are free again.
			resps, err := streamAll(t, connect(), req(a))
			if err != nil || len(streamed(resps)) != 12 {
				t.Errorf("after the held streams ended: %d messages, %v", len(streamed(resps)), err)
			}
		})
	}
}

// readCounter counts the messages StreamMessages reads from the store.
type readCounter struct {
	store.Store
	read atomic.Int64
}

func (r *readCounter) StreamMessages(ctx context.Context, owner string, q store.MessageQuery, fn func(*mb.GroupMessageSave) error) (bool, error) {
	return r.Store.StreamMessages(ctx, owner, q, func(m *mb.GroupMessageSave) error {
		r.read.Add(1)
		return fn(m)
	})
}
