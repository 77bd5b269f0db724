package codec

import mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"

// TypeGroupUpdated is this type's identifier, spelled as the reference client spells it.
var TypeGroupUpdated = TypeID{"xmtp.org", "group_updated", 1, 0}

// GroupUpdatedCodec is xmtp.org/group_updated:1.0, a commit transcript: the
// client derives it from validated commits (GMOD-034) and never publishes
// it (GMOD-035), so it decodes only (CTYPE-026).
type GroupUpdatedCodec struct{}

func (GroupUpdatedCodec) ContentType() TypeID { return TypeGroupUpdated }
func (GroupUpdatedCodec) ShouldPush() bool    { return false }

func (GroupUpdatedCodec) Encode(any) (*mc.EncodedContent, error) {
	return nil, encodeError("", "decode only: group updated is a commit transcript derived from validated commits, never published as an application message (CTYPE-026, GMOD-035)")
}

func (GroupUpdatedCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeProto(ec, new(mc.GroupUpdated), "GroupUpdated")
}
