package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// DefaultMaxAppendBatch is how many messages one AppendMessages call takes.
const DefaultMaxAppendBatch = 10_000

// maxSetConsent is how many records one SetConsent call takes.
const maxSetConsent = 1000

// listContentBudget bounds one ListMessages page, so that a page of large
// attachments stays under the response size limit: a page ends early, with
// a token, before it would hold more than this (or at its first message).
const listContentBudget = 8 << 20

// ConversationService implements contentbackup.v1.ConversationService: it
// checks requests (records), maps them to the store, and maps the store's
// errors to status codes.
type ConversationService struct {
	cb.UnimplementedConversationServiceServer
	store     store.Store
	registry  *codec.Registry
	maxAppend int
	tokens    *pageTokens
}

// NewConversationService returns the service; maxAppend <= 0 means the
// default.
func NewConversationService(s store.Store, reg *codec.Registry, maxAppend int, tokens *pageTokens) *ConversationService {
	if maxAppend <= 0 {
		maxAppend = DefaultMaxAppendBatch
	}
	return &ConversationService{store: s, registry: reg, maxAppend: maxAppend, tokens: tokens}
}

func (s *ConversationService) PutGroup(ctx context.Context, req *cb.PutGroupRequest) (*cb.PutGroupResponse, error) {
	if err := errors.Join(records.CheckOwner(req.GetOwner()), records.CheckGroup(req.GetGroup())); err != nil {
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
	limit, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	after, err := s.tokens.parseGroups(req.GetOwner(), req.GetPageToken())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	groups, err := s.store.ListGroups(ctx, req.GetOwner(), after, limit)
	if err != nil {
		return nil, statusOf(err)
	}
	resp := &cb.ListGroupsResponse{Groups: groups}
	if len(groups) == limit {
		resp.NextPageToken = s.tokens.groups(req.GetOwner(), groups[len(groups)-1].GetId())
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
		if err := records.CheckMessage(m); err != nil {
			return nil, statusOf(records.At(fmt.Sprintf("messages[%d]", i), err))
		}
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
	if err := errors.Join(records.CheckOwner(req.GetOwner()), records.CheckID("group_id", req.GetGroupId())); err != nil {
		return nil, statusOf(err)
	}
	if req.StartNs != nil && req.EndNs != nil && req.GetStartNs() > req.GetEndNs() {
		return nil, status.Errorf(codes.InvalidArgument, "start_ns: %d is after end_ns %d", req.GetStartNs(), req.GetEndNs())
	}
	limit, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	q := store.MessageQuery{GroupID: req.GetGroupId(), StartNs: req.StartNs, EndNs: req.EndNs, Limit: limit}
	if q.After, err = s.tokens.parseMessages(req.GetOwner(), q, req.GetPageToken()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	msgs, err := s.store.ListMessages(ctx, req.GetOwner(), q)
	if err != nil {
		return nil, statusOf(err)
	}
	if len(msgs) == 0 {
		// An empty page of a group that does not exist is NOT_FOUND, so a
		// typo is not mistaken for a quiet group.
		if _, err := s.store.GetGroup(ctx, req.GetOwner(), req.GetGroupId()); err != nil {
			return nil, statusOf(err)
		}
	}
	resp := &cb.ListMessagesResponse{Messages: make([]*cb.StoredMessage, 0, len(msgs))}
	budget := listContentBudget
	for _, m := range msgs {
		// The content goes out twice: as stored, and decoded (or, when it
		// cannot be decoded, as Undecoded's copy of the bytes).
		cost := 2*len(m.GetDecryptedMessageBytes()) + 256
		if budget -= cost; budget < 0 && len(resp.Messages) > 0 {
			break
		}
		resp.Messages = append(resp.Messages, &cb.StoredMessage{Message: m, Decoded: s.registry.DecodeResponse(m.GetDecryptedMessageBytes())})
	}
	if n := len(resp.Messages); n == limit || n < len(msgs) {
		last := resp.Messages[n-1].GetMessage()
		resp.NextPageToken = s.tokens.messages(req.GetOwner(), q, store.MessageCursor{SentAtNs: last.GetSentAtNs(), ID: last.GetId()})
	}
	return resp, nil
}

func (s *ConversationService) DeleteMessage(ctx context.Context, req *cb.DeleteMessageRequest) (*cb.DeleteMessageResponse, error) {
	err := errors.Join(
		records.CheckOwner(req.GetOwner()),
		records.CheckID("group_id", req.GetGroupId()),
		records.CheckID("message_id", req.GetMessageId()),
	)
	if err == nil && req.GetActorInboxId() == "" {
		err = &records.FieldError{Field: "actor_inbox_id", Reason: "required: the inbox the caller acts as"}
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
		if err := errors.Join(records.CheckConsent(r), records.CheckConsentTime(r, time.Now())); err != nil {
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
	limit, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	after, err := s.tokens.parseConsent(req.GetOwner(), req.GetPageToken())
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
		resp.NextPageToken = s.tokens.consent(req.GetOwner(), store.ConsentKey{EntityType: last.GetEntityType(), Entity: last.GetEntity()})
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

// statusOf maps an error of the records or store layers to a status whose
// message names what was wrong. A field error carries a BadRequest detail,
// so callers can find the field without parsing the message.
func statusOf(err error) error {
	var fe *records.FieldError
	switch {
	case errors.As(err, &fe):
		st := status.New(codes.InvalidArgument, err.Error())
		if d, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: fe.Field, Description: fe.Reason},
		}}); derr == nil {
			st = d
		}
		return st.Err()
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrGroupInactive), errors.Is(err, store.ErrFailedPrecondition):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, records.ErrNotDeletable):
		return withReason(codes.FailedPrecondition, "NOT_DELETABLE", err.Error())
	case errors.Is(err, records.ErrNotAuthorized):
		return withReason(codes.PermissionDenied, "NOT_SENDER_OR_SUPER_ADMIN", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
