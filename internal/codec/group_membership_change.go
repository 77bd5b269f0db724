package codec

import mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"

// TypeGroupMembershipChange is this type's identifier, spelled as the reference client spells it.
var TypeGroupMembershipChange = TypeID{"xmtp.org", "group_membership_change", 1, 0}

// GroupMembershipChangeCodec is xmtp.org/group_membership_change:1.0, the
// legacy commit transcript; it decodes only (CTYPE-026).
type GroupMembershipChangeCodec struct{}

func (GroupMembershipChangeCodec) ContentType() TypeID { return TypeGroupMembershipChange }
func (GroupMembershipChangeCodec) ShouldPush() bool    { return false }

func (GroupMembershipChangeCodec) Encode(any) (*mc.EncodedContent, error) {
	return nil, encodeError("", "decode only: the legacy group membership change is a commit transcript, never published as an application message (CTYPE-026, GMOD-035)")
}

func (GroupMembershipChangeCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return decodeProto(ec, new(mc.GroupMembershipChanges), "GroupMembershipChanges")
}
