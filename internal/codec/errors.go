package codec

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Kind tells apart the failures CTYPE-009 requires an app to distinguish.
type Kind int

const (
	// KindNoMatchingCodec: no registered codec matches authority, type and major version.
	KindNoMatchingCodec Kind = iota + 1
	// KindDecodeFailed: a codec matched, but the content, its parameters or its compression are invalid.
	KindDecodeFailed
	// KindEncodeFailed: a value cannot be encoded (a violated encode check).
	KindEncodeFailed
	// KindMalformedEnvelope: the bytes are not an EncodedContent with a complete type.
	KindMalformedEnvelope
)

func (k Kind) String() string {
	switch k {
	case KindNoMatchingCodec:
		return "no matching codec"
	case KindDecodeFailed:
		return "decode failed"
	case KindEncodeFailed:
		return "encode failed"
	case KindMalformedEnvelope:
		return "malformed envelope"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Sentinel errors, one per Kind, for errors.Is.
var (
	ErrNoMatchingCodec   = errors.New("no matching codec")
	ErrDecodeFailed      = errors.New("decode failed")
	ErrEncodeFailed      = errors.New("encode failed")
	ErrMalformedEnvelope = errors.New("malformed envelope")
)

// Error is a codec failure. Field names what was wrong in the value or
// envelope (for example "parameters.encoding" or "actions[2].id"), so a
// caller can report it.
type Error struct {
	Kind   Kind
	Type   TypeID // the identifier involved, when known
	Field  string
	Reason string
}

func (e *Error) Error() string {
	msg := e.Kind.String()
	if e.Type != (TypeID{}) {
		msg += " for " + e.Type.String()
	}
	if e.Field != "" {
		msg += ": " + e.Field
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is matches the Kind's sentinel error.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNoMatchingCodec:
		return e.Kind == KindNoMatchingCodec
	case ErrDecodeFailed:
		return e.Kind == KindDecodeFailed
	case ErrEncodeFailed:
		return e.Kind == KindEncodeFailed
	case ErrMalformedEnvelope:
		return e.Kind == KindMalformedEnvelope
	}
	return false
}

func encodeError(field, format string, args ...any) *Error {
	return &Error{Kind: KindEncodeFailed, Field: field, Reason: fmt.Sprintf(format, args...)}
}

func decodeError(field, format string, args ...any) *Error {
	return &Error{Kind: KindDecodeFailed, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// withType fills in the identifier of a codec error that lacks one, so codecs
// need not repeat their own identifier in every check.
func withType(err error, t TypeID) error {
	var ce *Error
	if errors.As(err, &ce) {
		if ce.Type == (TypeID{}) {
			c := *ce
			c.Type = t
			return &c
		}
		return ce
	}
	return err
}

// Abbrev keeps an error from repeating a long caller value: at most 64
// bytes of it, cut at a rune boundary.
func Abbrev(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
