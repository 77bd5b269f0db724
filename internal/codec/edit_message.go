package codec

import (
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// TypeEditMessage is this type's identifier, spelled as the reference client spells it.
var TypeEditMessage = TypeID{"xmtp.org", "editMessage", 1, 0}

// EditMessageCodec is the reserved xmtp.org/editMessage:1.0. It has a schema
// but no active codec: it decodes so the message is kept and shown for what
// it is, and nothing ever applies it to the referenced message (CTYPE-020).
type EditMessageCodec struct{}

func (EditMessageCodec) ContentType() TypeID { return TypeEditMessage }
func (EditMessageCodec) ShouldPush() bool    { return false }

func (EditMessageCodec) Encode(any) (*mc.EncodedContent, error) {
	return nil, encodeError("", "decode only: xmtp.org/editMessage is reserved and has no active codec (CTYPE-020, CTYPE-026)")
}

func (EditMessageCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeProto(ec, new(ct.EditMessage), "EditMessage")
}
