package codec

import (
	"errors"

	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeReply is this type's identifier, spelled as the reference client spells it.
var TypeReply = TypeID{"xmtp.org", "reply", 1, 0}

// Reply is the value of xmtp.org/reply:1.0.
type Reply struct {
	// Reference is the replied-to message id.
	Reference string
	// ReferenceInboxID is the replied-to sender's inbox id, when known.
	ReferenceInboxID *string
	// Content is the nested envelope. To encode, a complete envelope
	// (CTYPE-011); decoded, the nested envelope with its content decompressed.
	Content *mc.EncodedContent
	// Nested is the decoded nested content; its Value is nil when
	// NestedUndecoded is set.
	Nested Decoded
	// NestedUndecoded is set when no codec matched the nested type: the
	// reply still decodes, with its reference, and the nested envelope is
	// kept in Content (CTYPE-027).
	NestedUndecoded *Error
}

// ReplyCodec is xmtp.org/reply:1.0: a nested EncodedContent with reference,
// contentType and, optionally, referenceInboxId parameters.
type ReplyCodec struct{}

func (ReplyCodec) ContentType() TypeID { return TypeReply }
func (ReplyCodec) ShouldPush() bool    { return true }

const (
	paramReference        = "reference"
	paramContentType      = "contentType"
	paramReferenceInboxID = "referenceInboxId"
)

func (ReplyCodec) Encode(v any) (*mc.EncodedContent, error) {
	r, ok := v.(*Reply)
	if !ok || r == nil {
		return nil, wrongValue("a *Reply", v)
	}
	if r.Reference == "" {
		return nil, encodeError("reply.reference", "required")
	}
	if r.Content == nil {
		return nil, encodeError("reply.content", "a complete nested EncodedContent is required (CTYPE-011)")
	}
	if err := CheckTyped(r.Content); err != nil {
		var ce *Error
		errors.As(err, &ce)
		return nil, encodeError("reply.content."+ce.Field, "%s: a nested envelope needs a type with authority and type id (CTYPE-011)", ce.Reason)
	}
	b, err := deterministic.Marshal(r.Content)
	if err != nil {
		return nil, encodeError("reply.content", "marshal: %v", err)
	}
	nestedType := TypeIDOf(r.Content.GetType())
	params := map[string]string{
		paramReference:   r.Reference,
		paramContentType: nestedType.String(),
	}
	if r.ReferenceInboxID != nil {
		params[paramReferenceInboxID] = *r.ReferenceInboxID
	}
	return envelope(TypeReply, b, params, ptr(replyFallback(r.Content))), nil
}

// replyFallback is the reference client's fallback text for replies.
func replyFallback(nested *mc.EncodedContent) string {
	if TypeIDOf(nested.GetType()).Key() == TypeText.Key() && nested.Compression == nil {
		return `Replied with "` + string(nested.GetContent()) + `" to an earlier message`
	}
	return "Replied to an earlier message"
}

func (ReplyCodec) Decode(ec *mc.EncodedContent, nested NestedDecoder) (any, error) {
	params := ec.GetParameters()
	ref, ok := params[paramReference]
	if !ok {
		return nil, decodeError("parameters.reference", "required")
	}
	r := &Reply{Reference: ref}
	if inbox, ok := params[paramReferenceInboxID]; ok {
		r.ReferenceInboxID = &inbox
	}
	inner := new(mc.EncodedContent)
	if err := proto.Unmarshal(ec.GetContent(), inner); err != nil {
		return nil, decodeError("content", "nested content is not an EncodedContent (CTYPE-029): %v", err)
	}
	if err := CheckTyped(inner); err != nil {
		return nil, decodeError("content", "nested content is untyped (CTYPE-029): %v", err)
	}
	// The nested envelope's own type selects the codec, whatever the
	// contentType parameter says (CTYPE-028).
	d, err := nested.DecodeNested(inner)
	var ce *Error
	switch {
	case err == nil:
		r.Content, r.Nested = d.Envelope, d
	case errors.As(err, &ce) && ce.Kind == KindNoMatchingCodec:
		r.Content, r.NestedUndecoded = d.Envelope, ce
		r.Nested = Decoded{Type: d.Type, Envelope: d.Envelope}
	default:
		return nil, decodeError("content", "nested content (CTYPE-029): %v", err)
	}
	return r, nil
}
