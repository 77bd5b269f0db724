package codec

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
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
func unmarshalEnvelope(b []byte, ec *mc.EncodedContent, spare *mc.ContentTypeId) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return wireError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return wireError(n)
			}
			if ec.Type == nil {
				ec.Type = spare
				if ec.Type == nil {
					ec.Type = new(mc.ContentTypeId)
				}
			}
			if err := unmarshalTypeID(v, ec.Type); err != nil {
				return err
			}
			b = b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return wireError(n)
			}
			if ec.Parameters == nil {
				ec.Parameters = make(map[string]string, 2)
			}
			if err := unmarshalParameter(v, ec.Parameters); err != nil {
				return err
			}
			b = b[n:]
		case num == 3 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return wireError(n)
			}
			s, err := utf8String(v)
			if err != nil {
				return err
			}
			ec.Fallback = &s
			b = b[n:]
		case num == 4 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return wireError(n)
			}
			ec.Content = v
			b = b[n:]
		case num == 5 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return wireError(n)
			}
			c := mc.Compression(int32(v))
			ec.Compression = &c
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return wireError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

func unmarshalTypeID(b []byte, t *mc.ContentTypeId) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return wireError(n)
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return wireError(n)
			}
			s, err := utf8String(v)
			if err != nil {
				return err
			}
			if num == 1 {
				t.AuthorityId = s
			} else {
				t.TypeId = s
			}
			b = b[n:]
		case (num == 3 || num == 4) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return wireError(n)
			}
			if num == 3 {
				t.VersionMajor = uint32(v)
			} else {
				t.VersionMinor = uint32(v)
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return wireError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

func unmarshalParameter(b []byte, params map[string]string) error {
	var key, value string
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return wireError(n)
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return wireError(n)
			}
			s, err := utf8String(v)
			if err != nil {
				return err
			}
			if num == 1 {
				key = s
			} else {
				value = s
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return wireError(n)
		}
		b = b[n:]
	}
	params[key] = value
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
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}
