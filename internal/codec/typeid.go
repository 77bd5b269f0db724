package codec

import (
	"strconv"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TypeID is a content type identifier (CTYPE section 1) as a comparable value.
type TypeID struct {
	Authority string
	Type      string
	Major     uint32
	Minor     uint32
}

// Key is what codec selection compares: authority, type and major version,
// never the minor version (CTYPE-001).
type Key struct {
	Authority string
	Type      string
	Major     uint32
}

// Key returns the selection key of the identifier.
func (t TypeID) Key() Key { return Key{t.Authority, t.Type, t.Major} }

// String returns the human-readable form, authority/type:major.minor.
func (t TypeID) String() string {
	if t.Minor == 0 {
		if e, ok := catalogueByKey[t.Key()]; ok && e.Type == t {
			return e.name
		}
	}
	return t.Authority + "/" + t.Type + ":" + strconv.FormatUint(uint64(t.Major), 10) + "." + strconv.FormatUint(uint64(t.Minor), 10)
}

// Proto returns the wire form of the identifier.
func (t TypeID) Proto() *mc.ContentTypeId {
	return &mc.ContentTypeId{AuthorityId: t.Authority, TypeId: t.Type, VersionMajor: t.Major, VersionMinor: t.Minor}
}

// TypeIDOf converts a wire identifier; a nil one gives the zero TypeID.
func TypeIDOf(p *mc.ContentTypeId) TypeID {
	if p == nil {
		return TypeID{}
	}
	return TypeID{p.GetAuthorityId(), p.GetTypeId(), p.GetVersionMajor(), p.GetVersionMinor()}
}

// The catalogue identifiers, spelled as the reference client spells them.
var (
	TypeText                  = TypeID{"xmtp.org", "text", 1, 0}
	TypeMarkdown              = TypeID{"xmtp.org", "markdown", 1, 0}
	TypeReaction              = TypeID{"xmtp.org", "reaction", 2, 0}
	TypeLegacyReaction        = TypeID{"xmtp.org", "reaction", 1, 0}
	TypeReply                 = TypeID{"xmtp.org", "reply", 1, 0}
	TypeReadReceipt           = TypeID{"xmtp.org", "readReceipt", 1, 0}
	TypeAttachment            = TypeID{"xmtp.org", "attachment", 1, 0}
	TypeRemoteAttachment      = TypeID{"xmtp.org", "remoteStaticAttachment", 1, 0}
	TypeMultiRemoteAttachment = TypeID{"xmtp.org", "multiRemoteStaticAttachment", 1, 0}
	TypeTransactionReference  = TypeID{"xmtp.org", "transactionReference", 1, 0}
	TypeWalletSendCalls       = TypeID{"xmtp.org", "walletSendCalls", 1, 0}
	TypeActions               = TypeID{"coinbase.com", "actions", 1, 0}
	TypeIntent                = TypeID{"coinbase.com", "intent", 1, 0}
	TypeGroupUpdated          = TypeID{"xmtp.org", "group_updated", 1, 0}
	TypeGroupMembershipChange = TypeID{"xmtp.org", "group_membership_change", 1, 0}
	TypeLeaveRequest          = TypeID{"xmtp.org", "leave_request", 1, 0}
	TypeDeleteMessage         = TypeID{"xmtp.org", "deleteMessage", 1, 0}
	TypeEditMessage           = TypeID{"xmtp.org", "editMessage", 1, 0}
)
