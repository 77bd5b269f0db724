package codec

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/wire"
)

// unmarshalEnvelope parses EncodedContent wire bytes exactly as
// proto.Unmarshal does (FuzzUnmarshalEnvelopeMatchesProto holds it to that),
// without the reflection the generic path spends on the parameters map: on
// the hot Decode path that was most of the time. Content aliases b.
//
// The rules it keeps: unknown fields, and known fields with an unexpected
// wire type, are skipped; the last scalar wins; a repeated message field
// merges; a repeated map key keeps the last value; strings must be UTF-8.
// spare, when not nil, becomes ec.Type if the type field is present, so a
// caller can allocate both at once.
func unmarshalEnvelope(b []byte, ec *mc.EncodedContent, spare *mc.ContentTypeId, spareParams map[string]string) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if ec.Type == nil {
				ec.Type = spare
				if ec.Type == nil {
					ec.Type = new(mc.ContentTypeId)
				}
			}
			return unmarshalTypeID(v, ec.Type)
		case num == 2 && typ == protowire.BytesType:
			if ec.Parameters == nil {
				ec.Parameters = spareParams
				if ec.Parameters == nil {
					ec.Parameters = make(map[string]string, 2)
				}
			}
			return unmarshalParameter(v, ec.Parameters)
		case num == 3 && typ == protowire.BytesType:
			s, err := utf8String(v)
			if err != nil {
				return err
			}
			ec.Fallback = &s
		case num == 4 && typ == protowire.BytesType:
			ec.Content = v
		case num == 5 && typ == protowire.VarintType:
			c := mc.Compression(int32(x))
			ec.Compression = &c
		}
		return nil
	})
}

func unmarshalTypeID(b []byte, t *mc.ContentTypeId) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			s, err := utf8String(v)
			t.AuthorityId = s
			return err
		case num == 2 && typ == protowire.BytesType:
			s, err := utf8String(v)
			t.TypeId = s
			return err
		case num == 3 && typ == protowire.VarintType:
			t.VersionMajor = uint32(x)
		case num == 4 && typ == protowire.VarintType:
			t.VersionMinor = uint32(x)
		}
		return nil
	})
}

func unmarshalParameter(b []byte, params map[string]string) error {
	var key, value string
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType || (num != 1 && num != 2) {
			return nil
		}
		s, err := utf8String(v)
		if num == 1 {
			key = s
		} else {
			value = s
		}
		return err
	})
	if err != nil {
		return err
	}
	params[key] = value
	return nil
}

// eachField walks the fields of one message, handing fn each length-delimited
// value (v) and each varint (x), and skipping fields of other wire types, as
// proto.Unmarshal skips what a message does not declare.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return wireError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = wire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = wire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return wireError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType || typ == protowire.VarintType {
			if err := fn(num, typ, v, x); err != nil {
				return err
			}
		}
	}
	return nil
}

var errInvalidUTF8 = errors.New("string field contains invalid UTF-8")

func utf8String(b []byte) (string, error) {
	if s, ok := interned(b); ok {
		return s, nil
	}
	if !utf8.Valid(b) {
		return "", errInvalidUTF8
	}
	return string(b), nil
}

// interned returns a constant for the strings nearly every envelope
// carries, so parsing them allocates nothing. (A switch on string(b) does
// not allocate.)
func interned(b []byte) (string, bool) {
	switch string(b) {
	case "xmtp.org":
		return "xmtp.org", true
	case "coinbase.com":
		return "coinbase.com", true
	case "text":
		return "text", true
	case "markdown":
		return "markdown", true
	case "reaction":
		return "reaction", true
	case "reply":
		return "reply", true
	case "readReceipt":
		return "readReceipt", true
	case "attachment":
		return "attachment", true
	case "remoteStaticAttachment":
		return "remoteStaticAttachment", true
	case "encoding":
		return "encoding", true
	case "UTF-8":
		return "UTF-8", true
	case "mimeType":
		return "mimeType", true
	case "reference":
		return "reference", true
	case "contentType":
		return "contentType", true
	}
	return "", false
}

func wireError(n int) error {
	return fmt.Errorf("parse: %w", protowire.ParseError(n))
}

// consumeTag is protowire.ConsumeTag with proto.Unmarshal's upper bound on
// field numbers.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := wire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}
