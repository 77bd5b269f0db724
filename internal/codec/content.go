package codec

import (
	"errors"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// This file maps between codec values and the contentbackup.v1 Content
// message, so that every transport (gRPC, the store's decoded reads) shows
// content the same way.

// EncodeContent encodes a catalogue value given as a Content message. A
// reply's nested Content is encoded first, with the same rules.
func (r *Registry) EncodeContent(c *cb.Content) (*mc.EncodedContent, error) {
	return r.encodeContentAt(c, 0)
}

func (r *Registry) encodeContentAt(c *cb.Content, depth int) (*mc.EncodedContent, error) {
	if depth > r.maxDepth {
		return nil, encodeError("content", "content nested deeper than %d levels", r.maxDepth)
	}
	t, v, err := r.valueOf(c, depth)
	if err != nil {
		return nil, err
	}
	return r.Encode(t, v)
}

func (r *Registry) valueOf(c *cb.Content, depth int) (TypeID, any, error) {
	for i := range descriptors {
		if v, ok, err := descriptors[i].fromContent(r, c, depth); ok {
			return descriptors[i].Type, v, err
		}
	}
	return TypeID{}, nil, encodeError("content", "no value set")
}

func (r *Registry) replyValue(rp *cb.Reply, depth int) (*Reply, error) {
	out := &Reply{Reference: rp.GetReference(), ReferenceInboxID: rp.ReferenceInboxId}
	switch n := rp.GetNested().(type) {
	case *cb.Reply_Content:
		ec, err := r.encodeContentAt(n.Content, depth+1)
		if err != nil {
			var ce *Error
			if errors.As(err, &ce) {
				c := *ce
				c.Field = "reply.content" + prefixed(ce.Field)
				return nil, &c
			}
			return nil, err
		}
		out.Content = ec
	case *cb.Reply_Encoded:
		out.Content = n.Encoded
	case *cb.Reply_Undecoded:
		return nil, encodeError("reply.undecoded", "is a decode result; set reply.content or reply.encoded")
	}
	return out, nil
}

func prefixed(field string) string {
	if field == "" {
		return ""
	}
	return "." + field
}

// ContentOf maps a decoded value to its Content message. ok is false for a
// value of an application codec, which Content has no member for.
func ContentOf(d Decoded) (*cb.Content, bool) {
	desc, ok := descriptorByKey[d.Type.Key()]
	if !ok {
		return nil, false
	}
	return desc.toContent(d)
}

func wrap[T any](v any, f func(T) *cb.Content) (*cb.Content, bool) {
	t, ok := v.(T)
	if !ok {
		return nil, false
	}
	return f(t), true
}

func replyMessage(r *Reply, raw []byte) *cb.Reply {
	out := &cb.Reply{Reference: r.Reference, ReferenceInboxId: r.ReferenceInboxID}
	if r.NestedUndecoded != nil {
		out.Nested = &cb.Reply_Undecoded{Undecoded: &cb.Undecoded{
			Kind:           cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC,
			Reason:         r.NestedUndecoded.Error(),
			Type:           r.Content.GetType(),
			Fallback:       r.Content.Fallback,
			EncodedContent: raw,
			Envelope:       r.Content,
		}}
		return out
	}
	if c, ok := ContentOf(r.Nested); ok {
		out.Nested = &cb.Reply_Content{Content: c}
	} else {
		out.Nested = &cb.Reply_Encoded{Encoded: r.Content}
	}
	return out
}

// Push returns the push value for t (CTYPE-010): the catalogue's, or an
// application codec's; ok is false for a type with neither.
func (r *Registry) Push(t TypeID) (push, ok bool) {
	if e, found := Catalogue(t); found {
		return e.Push, true
	}
	if c, found := r.Lookup(t); found {
		return c.ShouldPush(), true
	}
	return false, false
}

// DecodeResponse decodes serialized EncodedContent bytes into the API's
// outcome: the typed content, or Undecoded carrying its kind, the reason,
// the actual identifier, the fallback and the original bytes (CTYPE-008,
// CTYPE-009). It never fails: every input has an outcome.
func (r *Registry) DecodeResponse(b []byte) *cb.DecodeResponse {
	resp, _ := r.DecodeResponseMetered(b, nil)
	return resp
}

// DecodeResponseMetered is DecodeResponse charging m for what decoding
// allocates (see DecodeMetered). The only error is a *BudgetError: the
// budget, not the content, stopped it, and there is no outcome to report.
func (r *Registry) DecodeResponseMetered(b []byte, m Meter) (*cb.DecodeResponse, error) {
	d, ec, err := r.DecodeMetered(b, m)
	var be *BudgetError
	if errors.As(err, &be) {
		return nil, be
	}
	return r.outcome(b, d, ec, err), nil
}

func (r *Registry) outcome(b []byte, d Decoded, ec *mc.EncodedContent, err error) *cb.DecodeResponse {
	both := new(struct {
		resp cb.DecodeResponse
		push bool
	})
	resp := &both.resp
	if ec != nil {
		resp.Fallback = ec.Fallback
	}
	if ec != nil && checkTyped(ec) == nil {
		t := TypeIDOf(ec.GetType())
		resp.ContentType = t.String()
		if e, ok := Catalogue(t); ok {
			both.push = e.Push
			resp.Deletable, resp.ShouldPush = e.Deletable, &both.push
		} else if c, ok := r.Lookup(t); ok {
			push := c.ShouldPush()
			resp.ShouldPush = &push
		}
	}
	if err == nil {
		if c, ok := ContentOf(d); ok {
			resp.Result = &cb.DecodeResponse_Content{Content: c}
			return resp
		}
		err = &Error{Kind: KindDecodeFailed, Type: d.Type, Reason: "decoded by an application codec whose value has no Content message"}
	}
	resp.Result = &cb.DecodeResponse_Undecoded{Undecoded: undecoded(b, ec, d.Envelope, err)}
	return resp
}

func undecoded(raw []byte, parsed, plain *mc.EncodedContent, err error) *cb.Undecoded {
	u := &cb.Undecoded{Reason: err.Error(), EncodedContent: raw, Kind: cb.UndecodedKind_UNDECODED_KIND_DECODE_FAILED}
	var ce *Error
	if errors.As(err, &ce) {
		switch ce.Kind {
		case KindNoMatchingCodec:
			u.Kind = cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC
		case KindMalformedEnvelope:
			u.Kind = cb.UndecodedKind_UNDECODED_KIND_MALFORMED_ENVELOPE
		}
	}
	if parsed != nil {
		u.Type = parsed.GetType()
		u.Fallback = parsed.Fallback
		u.Envelope = parsed
	}
	if plain != nil {
		u.Envelope = plain
	}
	return u
}
