package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/contentapi"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/server/callbudget"
	"github.com/contentbackup/contentbackup/internal/server/pagetoken"
	"github.com/contentbackup/contentbackup/internal/server/streams"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/telemetry"
)

// DefaultMaxAppendBatch is how many messages one AppendMessages call takes.
const DefaultMaxAppendBatch = 10_000

// maxSetConsent is how many records one SetConsent call takes.
const maxSetConsent = 1000

// ConversationService implements contentbackup.v1.ConversationService: it
// checks requests (records), maps them to the store, and maps the store's
// errors to status codes.
type ConversationService struct {
	cb.UnimplementedConversationServiceServer
	store     store.Store
	registry  *codec.Registry
	maxAppend int
	tokens    *pagetoken.Sealer
	limits    Limits
	pool      *budget.Pool
	metrics   *telemetry.ServiceMetrics
	streams   *streams.Limiter // StreamMessages calls open at once
}

// ConversationOptions configure the service; zero values take defaults.
type ConversationOptions struct {
	MaxAppend int
	Tokens    *pagetoken.Sealer
	Limits    Limits
	// Pool is the server-wide memory budget ListMessages decodes under.
	Pool *budget.Pool
}

// NewConversationService returns the service.
func NewConversationService(s store.Store, reg *codec.Registry, o ConversationOptions) *ConversationService {
	if o.MaxAppend <= 0 {
		o.MaxAppend = DefaultMaxAppendBatch
	}
	if o.Tokens == nil {
		o.Tokens = pagetoken.New(nil)
	}
	o.Limits = o.Limits.withDefaults()
	if o.Pool == nil {
		o.Pool = budget.NewPool(o.Limits.MemoryBytes)
	}
	return &ConversationService{store: s, registry: reg, maxAppend: o.MaxAppend, tokens: o.Tokens, limits: o.Limits, pool: o.Pool,
		streams: streams.NewLimiter("message", o.Limits.MaxMessageStreams, o.Limits.MaxMessageStreamsPerOwner)}
}

func (s *ConversationService) PutGroup(ctx context.Context, req *cb.PutGroupRequest) (*cb.PutGroupResponse, error) {
	if err := errors.Join(records.CheckOwner(req.GetOwner()), records.CheckGroup(req.GetGroup())); err != nil {
		return nil, statusOf(err)
	}
	if err := s.limits.Records.CheckGroupSize(req.GetGroup()); err != nil {
		return nil, statusOf(err)
	}
	created, err := s.store.PutGroup(ctx, req.GetOwner(), req.GetGroup())
	if err != nil {
		return nil, statusOf(err)
	}
	return &cb.PutGroupResponse{Group: req.GetGroup(), Created: created}, nil
}

func (s *ConversationService) GetGroup(ctx context.Context, req *cb.GetGroupRequest) (*cb.GetGroupResponse, error) {
	if err := errors.Join(records.CheckOwner(req.GetOwner()), records.CheckID("group_id", req.GetGroupId())); err != nil {
		return nil, statusOf(err)
	}
	g, err := s.store.GetGroup(ctx, req.GetOwner(), req.GetGroupId())
	if err != nil {
		return nil, statusOf(err)
	}
	return &cb.GetGroupResponse{Group: g}, nil
}

func (s *ConversationService) ListGroups(ctx context.Context, req *cb.ListGroupsRequest) (*cb.ListGroupsResponse, error) {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return nil, statusOf(err)
	}
	limit, err := pagetoken.Size(req.GetPageSize())
	if err != nil {
		return nil, statusOf(err) // a BadRequest naming page_size
	}
	after, err := s.tokens.OpenGroups(principalName(ctx), req.GetOwner(), req.GetPageToken())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	groups, err := s.store.ListGroups(ctx, req.GetOwner(), after, limit)
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &cb.ListGroupsResponse{Groups: groups}
	if len(groups) == limit {
		resp.NextPageToken = s.tokens.GroupsToken(principalName(ctx), req.GetOwner(), groups[len(groups)-1].GetId())
	}
	return resp, nil
}

func (s *ConversationService) AppendMessages(ctx context.Context, req *cb.AppendMessagesRequest) (*cb.AppendMessagesResponse, error) {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return nil, statusOf(err)
	}
	msgs := req.GetMessages()
	switch {
	case len(msgs) == 0:
		return nil, status.Error(codes.InvalidArgument, "messages: at least one required")
	case len(msgs) > s.maxAppend:
		return nil, status.Errorf(codes.InvalidArgument, "messages: %d exceed the limit of %d per call", len(msgs), s.maxAppend)
	}
	for i, m := range msgs {
		if err := errors.Join(records.PrepareMessage(m), s.limits.Records.CheckMessageSize(m)); err != nil {
			return nil, statusOf(records.At(fmt.Sprintf("messages[%d]", i), err))
		}
	}
	// The store driver encodes the batch again (statement arguments, COPY
	// rows): reserve that much of the server's budget for the call.
	call, done := callbudget.Start(ctx, s.pool, "append", 2*int64(s.limits.Records.MessageRecordBytes())*int64(s.maxAppend))
	defer done()
	if err := call.Charge(2 * int64(proto.Size(req))); err != nil {
		return nil, statusOf(err)
	}
	outcomes, err := s.store.AppendMessages(ctx, req.GetOwner(), msgs, store.AppendOptions{})
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &cb.AppendMessagesResponse{Outcomes: make([]cb.AppendOutcome, len(outcomes))}
	for i, o := range outcomes {
		if o == store.Inserted {
			resp.Outcomes[i] = cb.AppendOutcome_APPEND_OUTCOME_INSERTED
			resp.Inserted++
		} else {
			resp.Outcomes[i] = cb.AppendOutcome_APPEND_OUTCOME_UNCHANGED
			resp.Unchanged++
		}
	}
	return resp, nil
}

func (s *ConversationService) ListMessages(ctx context.Context, req *cb.ListMessagesRequest) (*cb.ListMessagesResponse, error) {
	q, err := s.messageQuery(ctx, req.GetOwner(), req.GetGroupId(), req.StartNs, req.EndNs, req.GetPageSize(), pagetoken.DefaultSize, req.GetPageToken())
	if err != nil {
		return nil, err
	}
	// Decoding is charged to the call's and the server's budgets.
	call, done := callbudget.Start(ctx, s.pool, "list decode", s.limits.CallExpandBytes)
	defer done()
	page, err := s.messagePage(ctx, req.GetOwner(), q, call, true)
	if err != nil {
		return nil, err
	}
	return &cb.ListMessagesResponse{Messages: page.messages, NextPageToken: page.next}, nil
}

// StreamMessages sends the pages ListMessages would, one after another: a
// goroutine sends each page while the next is read and decoded. Each page
// has a budget of its own, closed once the page is sent, so a call holds
// at most three pages (one sending, one waiting, one being built).
func (s *ConversationService) StreamMessages(req *cb.StreamMessagesRequest, stream grpc.ServerStreamingServer[cb.StreamMessagesResponse]) error {
	q, err := s.messageQuery(stream.Context(), req.GetOwner(), req.GetGroupId(), req.StartNs, req.EndNs, req.GetPageSize(), pagetoken.MaxSize, req.GetPageToken())
	if err != nil {
		return err
	}
	leave, err := s.streams.EnterFor("owner:"+req.GetOwner(), "owner")
	if err != nil {
		return err
	}
	defer leave()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sender := streams.StartSender(ctx, cancel, 1, s.limits.StreamIdleTimeout,
		func(p sendablePage) error { return stream.Send(p.resp) },
		func(p sendablePage) { p.call.Close() })
	err = func() error {
		for first := true; ; first = false {
			call := s.pool.NewCall("stream decode", s.limits.CallExpandBytes)
			page, err := s.messagePage(ctx, req.GetOwner(), q, call, first)
			if err != nil {
				call.Close()
				return err
			}
			if len(page.messages) == 0 && !first {
				// The last page was full and nothing followed it.
				call.Close()
				return nil
			}
			p := sendablePage{&cb.StreamMessagesResponse{Messages: page.messages, ResumeToken: page.next}, call}
			if err := sender.Put(p); err != nil {
				p.call.Close()
				return err
			}
			if page.next == "" {
				return nil
			}
			q.After = &page.cursor
		}
	}()
	if serr := sender.Finish(); serr != nil {
		// A stalled client, or a failed send that cancelled the reading:
		// it is the cause.
		if status.Code(serr) == codes.DeadlineExceeded {
			return serr
		}
		err = serr
	}
	if err != nil {
		if ctxErr := stream.Context().Err(); ctxErr != nil {
			return status.FromContextError(ctxErr).Err()
		}
		if _, ok := status.FromError(err); ok {
			return err
		}
		return statusOf(err)
	}
	return nil
}

// sendablePage is a page of StreamMessages and the budget that paid for
// it, closed once it is sent.
type sendablePage struct {
	resp *cb.StreamMessagesResponse
	call *budget.Call
}

// messageQuery checks a request for one group's messages and returns its
// query; page size 0 means def.
func (s *ConversationService) messageQuery(ctx context.Context, owner string, group []byte, startNs, endNs *int64, size int32, def int, token string) (store.MessageQuery, error) {
	if err := errors.Join(records.CheckOwner(owner), records.CheckID("group_id", group)); err != nil {
		return store.MessageQuery{}, statusOf(err)
	}
	if startNs != nil && endNs != nil && *startNs > *endNs {
		return store.MessageQuery{}, status.Errorf(codes.InvalidArgument, "start_ns: %d is after end_ns %d", *startNs, *endNs)
	}
	limit := def
	if size != 0 {
		var err error
		if limit, err = pagetoken.Size(size); err != nil {
			return store.MessageQuery{}, statusOf(err) // a BadRequest naming page_size
		}
	}
	q := store.MessageQuery{GroupID: group, StartNs: startNs, EndNs: endNs, Limit: limit}
	var err error
	if q.After, err = s.tokens.OpenMessages(principalName(ctx), owner, q, token); err != nil {
		return store.MessageQuery{}, status.Error(codes.InvalidArgument, err.Error())
	}
	// Stored content is read no further than the page can return.
	q.MaxBytes = s.limits.ListPageBytes
	// An expired message is never listed, whether or not the purge has
	// deleted it yet (META-051); the page token does not bind the time.
	q.LiveAtNs = time.Now().UnixNano()
	return q, nil
}

// messagePage is one page of q: its messages, decoded, and when more may
// follow, the token and cursor after its last.
type messagePage struct {
	messages []*cb.StoredMessage
	next     string
	cursor   store.MessageCursor
}

// messagePage reads and decodes one page of q, charging call. The page
// ends early, with a token, before its response would pass the page
// limit, except that its first message is always returned, so every
// stored message can be listed. An empty first page of a group that does
// not exist is NOT_FOUND, so a typo is not mistaken for a quiet group.
func (s *ConversationService) messagePage(ctx context.Context, owner string, q store.MessageQuery, call *budget.Call, first bool) (messagePage, error) {
	rows := s.readPage(ctx, owner, q)
	defer rows.stop()
	msgs := make([]*cb.StoredMessage, 0, min(q.Limit, 256))
	// Decoding reuses one envelope's memory from message to message.
	var scratch codec.Scratch
	pageBytes, read, cut := 0, 0, false
	for batch := range rows.batches {
		read += len(batch)
		// The batch's StoredMessages in one allocation: they live as long
		// as the page does.
		stored := make([]cb.StoredMessage, len(batch))
		for j, m := range batch {
			i := len(msgs)
			decoded, err := contentapi.DecodeResponse(s.registry, m.GetDecryptedMessageBytes(), contentapi.Options{DecodeOptions: codec.DecodeOptions{Meter: call, Scratch: &scratch}})
			if err != nil {
				if i > 0 {
					cut = true // what is decoded so far goes out; the rest on the next page
					break
				}
				return messagePage{}, decodeBudgetStatus(err, "messages")
			}
			// What it marshals to, with its field's tag and length, sized
			// by the code the response is marshalled by (proto.Size through
			// reflection was a sixth of a page's time).
			size := protowire.SizeBytes(m.SizeVT()) + protowire.SizeBytes(decoded.SizeVT()) + 2 + 8
			if i > 0 && pageBytes+size > s.limits.ListPageBytes {
				cut = true
				break
			}
			// What gRPC will marshal of it.
			if err := call.Charge(int64(size)); err != nil {
				if i > 0 {
					cut = true
					break
				}
				return messagePage{}, decodeBudgetStatus(err, "messages")
			}
			pageBytes += size
			s.metrics.Decoded(decoded)
			sm := &stored[j]
			sm.Message, sm.Decoded = m, decoded
			msgs = append(msgs, sm)
		}
		if cut {
			break
		}
	}
	rows.stop()
	full, err := rows.result()
	if err != nil {
		return messagePage{}, statusOf(err)
	}
	if read == 0 && first {
		if _, err := s.store.GetGroup(ctx, owner, q.GroupID); err != nil {
			return messagePage{}, statusOf(err)
		}
	}
	page := messagePage{messages: msgs}
	if n := len(msgs); n > 0 && (n == q.Limit || cut || full) {
		last := msgs[n-1].GetMessage()
		page.cursor = store.MessageCursor{SentAtNs: last.GetSentAtNs(), ID: last.GetId()}
		page.next = s.tokens.MessagesToken(principalName(ctx), owner, q, page.cursor)
	}
	return page, nil
}

// pageReader reads a page of messages in a goroutine of its own and hands
// them over in small batches, so decoding a page overlaps reading it.
type pageReader struct {
	batches <-chan []*mb.GroupMessageSave
	quit    chan struct{}
	stopped bool
	done    chan struct{}
	full    bool
	err     error
}

// pageBatch is how many messages go over at once: enough that the
// hand-over costs nothing per message, few enough that decoding starts
// while the page is still arriving.
const pageBatch = 64

// errPageStopped ends a page's read that decoding cut short: the rows
// loop ends as it does at a full page, without cancelling the query.
var errPageStopped = errors.New("page read stopped")

// readPage starts reading q's page; batches is closed when it ends.
func (s *ConversationService) readPage(ctx context.Context, owner string, q store.MessageQuery) *pageReader {
	// Two batches may wait: the page's bytes are bounded by q.MaxBytes
	// either way, and the reader never runs far ahead of decoding.
	out := make(chan []*mb.GroupMessageSave, 2)
	r := &pageReader{batches: out, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer close(out)
		batch := make([]*mb.GroupMessageSave, 0, pageBatch)
		send := func() error {
			select {
			case out <- batch:
				batch = make([]*mb.GroupMessageSave, 0, pageBatch)
				return nil
			case <-r.quit:
				return errPageStopped
			}
		}
		r.full, r.err = s.store.StreamMessages(ctx, owner, q, func(m *mb.GroupMessageSave) error {
			batch = append(batch, m)
			if len(batch) == pageBatch {
				return send()
			}
			return nil
		})
		if r.err == nil && len(batch) > 0 {
			r.err = send()
		}
	}()
	return r
}

// stop ends the read early and waits for the reader to end.
func (r *pageReader) stop() {
	if !r.stopped {
		r.stopped = true
		close(r.quit)
	}
	<-r.done
}

// result waits for the reader to end and reports the page's end; a read
// that stop ended reports no error.
func (r *pageReader) result() (full bool, err error) {
	<-r.done
	if errors.Is(r.err, errPageStopped) {
		return r.full, nil
	}
	return r.full, r.err
}

func (s *ConversationService) DeleteMessage(ctx context.Context, req *cb.DeleteMessageRequest) (*cb.DeleteMessageResponse, error) {
	err := errors.Join(
		records.CheckOwner(req.GetOwner()),
		records.CheckID("group_id", req.GetGroupId()),
		records.CheckID("message_id", req.GetMessageId()),
	)
	if err == nil {
		err = records.CheckActor("actor_inbox_id", req.GetActorInboxId())
	}
	if err != nil {
		return nil, statusOf(err)
	}
	err = s.store.DeleteMessage(ctx, req.GetOwner(), req.GetGroupId(), req.GetMessageId(),
		func(m *mb.GroupMessageSave, g *gb.GroupSave) error {
			return records.CheckDeletion(m, g, req.GetActorInboxId())
		})
	if err != nil {
		return nil, statusOf(err)
	}
	return &cb.DeleteMessageResponse{}, nil
}

func (s *ConversationService) SetConsent(ctx context.Context, req *cb.SetConsentRequest) (*cb.SetConsentResponse, error) {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return nil, statusOf(err)
	}
	recs := req.GetRecords()
	switch {
	case len(recs) == 0:
		return nil, status.Error(codes.InvalidArgument, "records: at least one required")
	case len(recs) > maxSetConsent:
		return nil, status.Errorf(codes.InvalidArgument, "records: %d exceed the limit of %d per call", len(recs), maxSetConsent)
	}
	for i, r := range recs {
		if err := errors.Join(records.CheckConsent(r), s.limits.Records.CheckConsentSize(r), records.CheckConsentTime(r, time.Now())); err != nil {
			return nil, statusOf(records.At(fmt.Sprintf("records[%d]", i), err))
		}
	}
	outcomes, err := s.store.MergeConsent(ctx, req.GetOwner(), recs)
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &cb.SetConsentResponse{Outcomes: make([]cb.ConsentOutcome, len(outcomes))}
	for i, o := range outcomes {
		resp.Outcomes[i] = cb.ConsentOutcome_CONSENT_OUTCOME_UNCHANGED
		if o != store.Unchanged {
			resp.Outcomes[i] = cb.ConsentOutcome_CONSENT_OUTCOME_STORED
		}
	}
	return resp, nil
}

func (s *ConversationService) ListConsent(ctx context.Context, req *cb.ListConsentRequest) (*cb.ListConsentResponse, error) {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return nil, statusOf(err)
	}
	limit, err := pagetoken.Size(req.GetPageSize())
	if err != nil {
		return nil, statusOf(err) // a BadRequest naming page_size
	}
	after, err := s.tokens.OpenConsent(principalName(ctx), req.GetOwner(), req.GetPageToken())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	recs, err := s.store.ListConsent(ctx, req.GetOwner(), after, limit)
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &cb.ListConsentResponse{Records: recs}
	if len(recs) == limit {
		last := recs[len(recs)-1]
		resp.NextPageToken = s.tokens.ConsentToken(principalName(ctx), req.GetOwner(), store.ConsentKey{EntityType: last.GetEntityType(), Entity: last.GetEntity()})
	}
	return resp, nil
}

func (s *ConversationService) ActivateGroup(ctx context.Context, req *cb.ActivateGroupRequest) (*cb.ActivateGroupResponse, error) {
	if err := errors.Join(records.CheckOwner(req.GetOwner()), records.CheckID("group_id", req.GetGroupId())); err != nil {
		return nil, statusOf(err)
	}
	g, activated, err := s.store.ActivateGroup(ctx, req.GetOwner(), req.GetGroupId())
	if err != nil {
		return nil, statusOf(err)
	}
	return &cb.ActivateGroupResponse{Group: g, Activated: activated}, nil
}
