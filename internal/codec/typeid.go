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
	return t.format()
}

func (t TypeID) format() string {
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
