package codec

import mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"

// TypeMarkdown is this type's identifier, spelled as the reference client spells it.
var TypeMarkdown = TypeID{"xmtp.org", "markdown", 1, 0}

// MarkdownCodec is xmtp.org/markdown:1.0: UTF-8 Markdown with encoding=UTF-8.
type MarkdownCodec struct{}

func (MarkdownCodec) ContentType() TypeID { return TypeMarkdown }
func (MarkdownCodec) ShouldPush() bool    { return true }

func (MarkdownCodec) Encode(v any) (*mc.EncodedContent, error) { return encodeUTF8(TypeMarkdown, v) }

func (MarkdownCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeUTF8(ec)
}
