package codec

import (
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// Codec is the encode and decode pair for one identifier (CTYPE section 3).
//
// Encode returns an uncompressed envelope whose type is ContentType()
// (CTYPE-007); compression is applied separately, and only when asked
// (CTYPE-031). Decode receives an envelope whose content has already been
// decompressed (CTYPE-024) and whose type matched under CTYPE-001; it must
// ignore parameters its type does not name (CTYPE-014). Both return *Error
// for a violated check.
type Codec interface {
	ContentType() TypeID
	Encode(value any) (*mc.EncodedContent, error)
	Decode(content *mc.EncodedContent, nested NestedDecoder) (any, error)
	// ShouldPush is the type's default push value (CTYPE-010).
	ShouldPush() bool
}

// NestedDecoder decodes content carried inside other content (CTYPE
// section 5) with the same rules as top-level content, bounded in depth.
type NestedDecoder interface {
	DecodeNested(content *mc.EncodedContent) (Decoded, error)
}

// Decoded is content a codec decoded.
type Decoded struct {
	// Type is the identifier the envelope carries, minor version included.
	Type TypeID
	// Value is the codec's value; see the package documentation for the
	// type each catalogue codec returns.
	Value any
	// Envelope is the envelope as decoded, with content decompressed.
	Envelope *mc.EncodedContent
}

func wrongValue(want string, got any) *Error {
	return encodeError("", "value must be %s, got %T", want, got)
}

func envelope(t TypeID, content []byte, params map[string]string, fallback *string) *mc.EncodedContent {
	return &mc.EncodedContent{Type: t.Proto(), Parameters: params, Fallback: fallback, Content: content}
}

func ptr[T any](v T) *T { return &v }
