package server

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/contentapi"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/preview"
	"github.com/contentbackup/contentbackup/internal/server/callbudget"
	"github.com/contentbackup/contentbackup/internal/telemetry"
)

// deterministic output: the same request always gives the same bytes.
var deterministic = proto.MarshalOptions{Deterministic: true}

// DefaultMaxDecodeBatch is how many envelopes one DecodeBatch call takes.
const DefaultMaxDecodeBatch = 1000

// ContentService implements contentbackup.v1.ContentService over a codec
// registry. It maps messages and status codes; the rules live in codec.
type ContentService struct {
	cb.UnimplementedContentServiceServer
	registry   *codec.Registry
	maxBatch   int
	callBudget int64
	pool       *budget.Pool
	metrics    *telemetry.ServiceMetrics
	// words are the previews' (preview.Defaults when New was given none).
	words *preview.Words
}

// DefaultMaxBatchExpanded bounds what one decoding call (Decode,
// DecodeBatch, a ListMessages page) may expand to: decompressed content
// (its chunks and their join), decoded values and the response to be
// marshalled, failed decodes included. One envelope at the 16 MiB
// CTYPE-025 cap costs about 64 MiB of it; a batch of them is bounded here.
const DefaultMaxBatchExpanded = 96 << 20

// NewContentService returns the service; a limit <= 0 means its default.
// Every decode is charged to a per-call budget of callBudget bytes and to
// pool.
func NewContentService(reg *codec.Registry, maxBatch int, callBudget int64, pool *budget.Pool) *ContentService {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxDecodeBatch
	}
	if callBudget <= 0 {
		callBudget = DefaultMaxBatchExpanded
	}
	return &ContentService{registry: reg, maxBatch: maxBatch, callBudget: callBudget, pool: pool}
}

func (s *ContentService) Encode(ctx context.Context, req *cb.EncodeRequest) (*cb.EncodeResponse, error) {
	var ec *mc.EncodedContent
	var err error
	switch in := req.GetInput().(type) {
	case *cb.EncodeRequest_Content:
		ec, err = contentapi.Encode(s.registry, in.Content)
		if err != nil {
			return nil, invalidArgument("content", err)
		}
	case *cb.EncodeRequest_Custom:
		call, done := callbudget.Start(ctx, s.pool, "decode", s.callBudget)
		ec, err = in.Custom, s.registry.CheckPublishable(in.Custom, call)
		done()
		var be *codec.BudgetError
		if errors.As(err, &be) {
			return nil, decodeBudgetStatus(err, "custom")
		}
		if err != nil {
			return nil, invalidArgument("custom", err)
		}
		if ec.Compression != nil && req.Compression != nil {
			return nil, status.Error(codes.InvalidArgument, "compression: custom envelope is already compressed")
		}
	default:
		return nil, status.Error(codes.InvalidArgument, "input: set content (a catalogue value) or custom (an EncodedContent)")
	}
	if req.Compression != nil {
		out, err := codec.Compress(ec.GetContent(), req.GetCompression())
		if err != nil {
			return nil, invalidArgument("", err)
		}
		ec.Content, ec.Compression = out, req.Compression
	}
	b, err := deterministic.Marshal(ec)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "marshal envelope: %v", err)
	}
	t := codec.TypeIDOf(ec.GetType())
	resp := &cb.EncodeResponse{EncodedContent: b, Envelope: ec, ContentType: t.String(), Deletable: codec.Deletable(t)}
	if push, ok := s.registry.Push(t); ok {
		resp.ShouldPush = &push
	}
	return resp, nil
}

func (s *ContentService) Decode(ctx context.Context, req *cb.DecodeRequest) (*cb.DecodeResponse, error) {
	call, done := callbudget.Start(ctx, s.pool, "decode", s.callBudget)
	defer done()
	opts, err := s.decodeOptions(call, req.GetPreview())
	if err != nil {
		return nil, err
	}
	resp, err := contentapi.DecodeResponse(s.registry, req.GetEncodedContent(), opts)
	if err == nil {
		err = call.Charge(int64(resp.SizeVT())) // the response gRPC marshals
	}
	if err != nil {
		return nil, decodeBudgetStatus(err, "encoded_content")
	}
	s.metrics.Decoded(resp)
	return resp, nil
}

func (s *ContentService) DecodeBatch(ctx context.Context, req *cb.DecodeBatchRequest) (*cb.DecodeBatchResponse, error) {
	in := req.GetEncodedContents()
	if len(in) > s.maxBatch {
		return nil, status.Errorf(codes.InvalidArgument, "encoded_contents: %d envelopes exceed the batch limit of %d", len(in), s.maxBatch)
	}
	// One budget for the whole batch, charged by failed decodes too, so a
	// batch of bombs stops as soon as it has cost what one call may.
	call, done := callbudget.Start(ctx, s.pool, "decode", s.callBudget)
	defer done()
	out := make([]*cb.DecodeResponse, len(in))
	opts, err := s.decodeOptions(call, req.GetPreview())
	if err != nil {
		return nil, err
	}
	for i, b := range in {
		resp, err := contentapi.DecodeResponse(s.registry, b, opts)
		if err == nil {
			err = call.Charge(int64(resp.SizeVT())) // its share of the response
		}
		if err != nil {
			return nil, decodeBudgetStatus(err, "encoded_contents["+strconv.Itoa(i)+"]")
		}
		out[i] = resp
	}
	for _, r := range out {
		s.metrics.Decoded(r)
	}
	return &cb.DecodeBatchResponse{Results: out}, nil
}

// Preview is Decode's preview alone: the same budget, the same outcome.
func (s *ContentService) Preview(ctx context.Context, req *cb.PreviewRequest) (*cb.PreviewResponse, error) {
	call, done := callbudget.Start(ctx, s.pool, "decode", s.callBudget)
	defer done()
	opts := req.GetOptions()
	if opts == nil {
		opts = &cb.PreviewOptions{}
	}
	o, err := s.decodeOptions(call, opts)
	if err != nil {
		return nil, err
	}
	resp, err := contentapi.DecodeResponse(s.registry, req.GetEncodedContent(), o)
	if err != nil {
		return nil, decodeBudgetStatus(err, "encoded_content")
	}
	s.metrics.Decoded(resp)
	return &cb.PreviewResponse{Preview: resp.GetPreview(), ContentType: resp.GetContentType()}, nil
}

// maxLocale bounds a preview's locale: a BCP 47 tag is at most 35
// characters in practice; the bound keeps a batch from lowercasing a huge
// string once per message.
const maxLocale = 64

// checkLocale refuses a locale that is not a short tag of letters, digits,
// '-' and '_'.
func checkLocale(l string) error {
	if len(l) > maxLocale {
		return status.Errorf(codes.InvalidArgument, "preview.locale: %d bytes, over the %d-byte limit of a language tag", len(l), maxLocale)
	}
	for _, r := range l {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return status.Error(codes.InvalidArgument, "preview.locale: a language tag holds letters, digits, '-' and '_' only")
		}
	}
	return nil
}

// decodeOptions are a decoding call's: its budget, and a preview when
// the caller asked for one.
func (s *ContentService) decodeOptions(call *budget.Call, p *cb.PreviewOptions) (contentapi.Options, error) {
	o := contentapi.Options{DecodeOptions: codec.DecodeOptions{Meter: call}}
	if p != nil {
		if err := checkLocale(p.GetLocale()); err != nil {
			return o, err
		}
		if s.words == nil {
			// Only a build whose embedded words do not load (its tests fail).
			return o, status.Error(codes.Unimplemented, "preview: this server has no preview words")
		}
		o.Preview = &contentapi.Previewing{Words: s.words.For(p.GetLocale()), Options: contentapi.PreviewOptions(p)}
	}
	return o, nil
}

func (s *ContentService) EncryptAttachment(_ context.Context, req *cb.EncryptAttachmentRequest) (*cb.EncryptAttachmentResponse, error) {
	if req.GetAttachment() == nil {
		return nil, status.Error(codes.InvalidArgument, "attachment: required")
	}
	payload, ra, err := codec.EncryptAttachment(rand.Reader, contentapi.AttachmentValue(req.GetAttachment()))
	if err != nil {
		return nil, invalidArgument("", err)
	}
	if req.GetUrl() != "" {
		ra.URL = req.GetUrl()
		if ra.Scheme, err = codec.SchemeFor(ra.URL); err != nil {
			return nil, invalidArgument("url", err)
		}
	}
	return &cb.EncryptAttachmentResponse{Payload: payload, RemoteAttachment: contentapi.RemoteAttachmentMessage(ra)}, nil
}

func (s *ContentService) DecryptAttachment(_ context.Context, req *cb.DecryptAttachmentRequest) (*cb.DecryptAttachmentResponse, error) {
	ra := contentapi.RemoteAttachmentValue(req.GetRemoteAttachment())
	if ra == nil {
		return nil, status.Error(codes.InvalidArgument, "remote_attachment: required")
	}
	if err := codec.CheckRemoteAttachment(ra); err != nil {
		return nil, invalidArgument("remote_attachment", err)
	}
	att, err := codec.DecryptAttachment(req.GetPayload(), ra)
	switch {
	case errors.Is(err, codec.ErrDigestMismatch):
		return nil, withReason(codes.InvalidArgument, fault.ReasonDigestMismatch, "payload: "+err.Error())
	case errors.Is(err, codec.ErrAuthentication):
		return nil, withReason(codes.InvalidArgument, fault.ReasonAuthenticationFailed, "payload: "+err.Error())
	case err != nil:
		return nil, invalidArgument("payload", err)
	}
	return &cb.DecryptAttachmentResponse{Attachment: contentapi.AttachmentMessage(att)}, nil
}
