// Package contentapi maps the codec's values to and from the API's
// contentbackup.v1 Content and DecodeResponse messages, so that every
// transport (the ContentService, the decoded content of ListMessages)
// shows content the same way, and the codec itself knows nothing of the
// service's responses.
//
// Each content type is one row of the members table (members.go): its
// member of Content and how that member's message becomes the codec's
// value and back. A test holds the table to the codec's descriptors and to
// Content's oneof, so a type added to one and not the others fails it.
package contentapi

import (
	"errors"
	"fmt"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/preview"
)

// Encode encodes a catalogue value given as a Content message. A reply's
// nested Content is encoded first, with the same rules.
func Encode(reg *codec.Registry, c *cb.Content) (*mc.EncodedContent, error) {
	return encodeAt(reg, c, 0)
}

func encodeAt(reg *codec.Registry, c *cb.Content, depth int) (*mc.EncodedContent, error) {
	if depth > reg.MaxNestingDepth() {
		return nil, encodeError("content", fmt.Sprintf("content nested deeper than %d levels", reg.MaxNestingDepth()))
	}
	t, v, err := valueOf(reg, c, depth)
	if err != nil {
		return nil, err
	}
	return reg.Encode(t, v)
}

func valueOf(reg *codec.Registry, c *cb.Content, depth int) (codec.TypeID, any, error) {
	for i := range members {
		if v, ok, err := members[i].fromContent(reg, c, depth); ok {
			return members[i].Type, v, err
		}
	}
	return codec.TypeID{}, nil, encodeError("content", "no value set")
}

func encodeError(field, reason string) *codec.Error {
	return &codec.Error{Kind: codec.KindEncodeFailed, Field: field, Reason: reason}
}

func replyValue(reg *codec.Registry, rp *cb.Reply, depth int) (*codec.Reply, error) {
	out := &codec.Reply{Reference: rp.GetReference(), ReferenceInboxID: rp.ReferenceInboxId}
	switch n := rp.GetNested().(type) {
	case *cb.Reply_Content:
		ec, err := encodeAt(reg, n.Content, depth+1)
		if err != nil {
			var ce *codec.Error
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

// Content maps a decoded value to its Content message. ok is false for a
// value of an application codec, which Content has no member for.
func Content(d codec.Decoded) (*cb.Content, bool) {
	m, ok := memberByKey[d.Type.Key()]
	if !ok {
		return nil, false
	}
	return m.toContent(d)
}

func replyMessage(r *codec.Reply, raw []byte) *cb.Reply {
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
	if c, ok := Content(r.Nested); ok {
		out.Nested = &cb.Reply_Content{Content: c}
	} else {
		out.Nested = &cb.Reply_Encoded{Encoded: r.Content}
	}
	return out
}

// Options are a DecodeResponse's: the codec's, and a preview to add.
type Options struct {
	codec.DecodeOptions
	// Preview, when set, adds the outcome's notification preview.
	Preview *Previewing
}

// Previewing is the words, in the caller's locale, and the caller's
// options of a preview.
type Previewing struct {
	Words   *preview.Table
	Options preview.Options
}

// PreviewOptions reads the API's preview options.
func PreviewOptions(o *cb.PreviewOptions) preview.Options {
	return preview.Options{Locale: o.GetLocale(), MaxBodyBytes: int(min(o.GetMaxBodyBytes(), preview.MaxBudget)),
		MaxTitleBytes: int(min(o.GetMaxTitleBytes(), preview.MaxBudget)), IncludeSilent: o.GetIncludeSilent()}
}

// setPreview fills out, a preview as the API shows it, with p.
func setPreview(out *cb.Preview, p preview.Preview) {
	out.Push, out.Title, out.Body, out.Truncated, out.FromFallback = p.Push, p.Title, p.Body, p.Truncated, p.FromFallback
}

// DecodeResponse decodes serialized EncodedContent bytes into the API's
// outcome: the typed content, or Undecoded carrying its kind, the reason,
// the actual identifier, the fallback and the original bytes (CTYPE-008,
// CTYPE-009). Every input has an outcome; the only error is a
// *codec.BudgetError, when o.Meter refused a charge: the budget, not the
// content, stopped it. With o.Scratch, the memory of one call is reused
// by the next (see codec.Scratch); a response never refers to recycled
// memory: the scratch is recycled only after an outcome that is typed
// content, built of copies, while an Undecoded outcome keeps its envelope.
func DecodeResponse(reg *codec.Registry, b []byte, o Options) (*cb.DecodeResponse, error) {
	d, ec, err := reg.Decode(b, o.DecodeOptions)
	if err != nil {
		// Declared here, not above: errors.As moves its target to the
		// heap, an allocation for every message of a page otherwise.
		var be *codec.BudgetError
		if errors.As(err, &be) {
			return nil, be
		}
	}
	// An envelope comes back only once parsed with a complete type.
	var desc codec.Description
	if ec != nil {
		desc = reg.Describe(codec.TypeIDOf(ec.GetType()))
	}
	var resp *cb.DecodeResponse
	if o.Preview != nil {
		// One allocation for the response and its preview, made only
		// when a preview is asked for: a field in every response would
		// cost the calls that never ask for one.
		with := new(struct {
			alloc   outcomeAlloc
			preview cb.Preview
		})
		resp = outcome(&with.alloc, desc, b, d, ec, err)
		// Before the scratch is recycled: the words are copies.
		setPreview(&with.preview, o.Preview.Words.Of(reg, desc, d, ec, err, o.Preview.Options))
		resp.Preview = &with.preview
	} else {
		resp = outcome(new(outcomeAlloc), desc, b, d, ec, err)
	}
	if _, typed := resp.GetResult().(*cb.DecodeResponse_Content); typed && o.Scratch != nil {
		o.Scratch.Recycle()
	}
	return resp, nil
}

// outcomeAlloc is one allocation for a response, its push value and its
// content wrapper: DecodeBatch and ListMessages build many.
type outcomeAlloc struct {
	resp    cb.DecodeResponse
	push    bool
	content cb.DecodeResponse_Content
}

// outcome fills both with the response to one decode; desc is the
// description of ec's type.
func outcome(both *outcomeAlloc, desc codec.Description, b []byte, d codec.Decoded, ec *mc.EncodedContent, err error) *cb.DecodeResponse {
	resp := &both.resp
	if ec != nil {
		resp.Fallback = ec.Fallback
		resp.ContentType, resp.Deletable = desc.Name, desc.Deletable
		if desc.PushKnown {
			both.push = desc.Push
			resp.ShouldPush = &both.push
		}
	}
	if err == nil {
		if c, ok := Content(d); ok {
			both.content.Content = c
			resp.Result = &both.content
			return resp
		}
		err = &codec.Error{Kind: codec.KindDecodeFailed, Type: d.Type, Reason: "decoded by an application codec whose value has no Content message"}
	}
	resp.Result = &cb.DecodeResponse_Undecoded{Undecoded: undecoded(b, ec, d.Envelope, err)}
	return resp
}

func undecoded(raw []byte, parsed, plain *mc.EncodedContent, err error) *cb.Undecoded {
	u := &cb.Undecoded{Reason: err.Error(), EncodedContent: raw, Kind: cb.UndecodedKind_UNDECODED_KIND_DECODE_FAILED}
	var ce *codec.Error
	if errors.As(err, &ce) {
		switch ce.Kind {
		case codec.KindNoMatchingCodec:
			u.Kind = cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC
		case codec.KindMalformedEnvelope:
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
