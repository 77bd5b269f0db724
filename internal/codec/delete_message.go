package codec

import (
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// TypeDeleteMessage is this type's identifier, spelled as the reference client spells it.
var TypeDeleteMessage = TypeID{"xmtp.org", "deleteMessage", 1, 0}

// DeleteMessageCodec is xmtp.org/deleteMessage:1.0: a protobuf DeleteMessage
// whose message_id is the target id in lowercase hexadecimal.
type DeleteMessageCodec struct{}

func (DeleteMessageCodec) ContentType() TypeID { return TypeDeleteMessage }
func (DeleteMessageCodec) ShouldPush() bool    { return false }

func (DeleteMessageCodec) Encode(v any) (*mc.EncodedContent, error) {
	d, ok := v.(*ct.DeleteMessage)
	if !ok || d == nil {
		return nil, wrongValue("a *DeleteMessage", v)
	}
	if !isLowerHexString(d.GetMessageId()) {
		return nil, encodeError("delete_message.message_id", "must be a non-empty lowercase hexadecimal message id, got %q", Abbrev(d.GetMessageId()))
	}
	return encodeProto[*ct.DeleteMessage](TypeDeleteMessage, d, "DeleteMessage")
}

func (DeleteMessageCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeProto(ec, new(ct.DeleteMessage), "DeleteMessage")
}

func isLowerHexString(s string) bool {
	return s != "" && len(s)%2 == 0 && isLowerHex(s, len(s)/2)
}
