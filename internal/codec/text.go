package codec

import (
	"strings"
	"unicode/utf8"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeText is this type's identifier, spelled as the reference client spells it.
var TypeText = TypeID{"xmtp.org", "text", 1, 0}

// TextCodec is xmtp.org/text:1.0: UTF-8 text with encoding=UTF-8.
type TextCodec struct{}

func (TextCodec) ContentType() TypeID { return TypeText }
func (TextCodec) ShouldPush() bool    { return true }

func (TextCodec) Encode(v any) (*mc.EncodedContent, error) { return encodeUTF8(TypeText, v) }

func (TextCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) { return decodeUTF8(ec) }

const paramEncoding = "encoding"

func encodeUTF8(t TypeID, v any) (*mc.EncodedContent, error) {
	s, ok := v.(string)
	if !ok {
		return nil, wrongValue("a string", v)
	}
	if !utf8.ValidString(s) {
		return nil, encodeError("content", "not valid UTF-8")
	}
	return envelope(t, []byte(s), map[string]string{paramEncoding: "UTF-8"}, nil), nil
}

// decodeUTF8 applies the text and markdown row of the 7.2 validation table:
// UTF-8 when the encoding parameter is absent, any other value rejected.
func decodeUTF8(ec *mc.EncodedContent) (any, error) {
	if enc, ok := ec.GetParameters()[paramEncoding]; ok && !strings.EqualFold(enc, "UTF-8") {
		return nil, decodeError("parameters.encoding", "unsupported encoding %q", Abbrev(enc))
	}
	if !utf8.Valid(ec.GetContent()) {
		return nil, decodeError("content", "not valid UTF-8")
	}
	return string(ec.GetContent()), nil
}
