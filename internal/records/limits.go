package records

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"google.golang.org/protobuf/proto"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// Limits bounds the size of each kind of record, enforced identically by
// every way a record comes in (AppendMessages, PutGroup, SetConsent and
// Import), so that whatever is stored can be read back, listed and
// exported. Keys (owner, ids, actor) have fixed limits: MaxOwnerBytes,
// MaxIDBytes, MaxActorBytes.
type Limits struct {
	// GroupBytes bounds a group record's encoded size.
	GroupBytes int
	// MessageContentBytes bounds a message's content (the stored
	// EncodedContent bytes, compressed or not).
	MessageContentBytes int
	// MessageBytes bounds a message record's encoded size beside its
	// content: every other field together (ids, sender, type fields), so
	// that none of them can take the room the content limit allows.
	MessageBytes int
	// ConsentBytes bounds a consent record's encoded size.
	ConsentBytes int
}

// DefaultLimits: a group's metadata and member lists fit in 256 KiB; a
// message's content may reach the 16 MiB CTYPE-025 limit on decompressed
// content, so that content sent compressed fits however it expands; a
// consent record is a key and a state.
var DefaultLimits = Limits{
	GroupBytes:          256 << 10,
	MessageContentBytes: 16 << 20,
	MessageBytes:        64 << 10,
	ConsentBytes:        4 << 10,
}

// MaxActorBytes bounds an inbox id a request acts as (a deletion's actor).
const MaxActorBytes = 256

// WithDefaults fills unset limits from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.GroupBytes <= 0 {
		l.GroupBytes = d.GroupBytes
	}
	if l.MessageContentBytes <= 0 {
		l.MessageContentBytes = d.MessageContentBytes
	}
	if l.MessageBytes <= 0 {
		l.MessageBytes = d.MessageBytes
	}
	if l.ConsentBytes <= 0 {
		l.ConsentBytes = d.ConsentBytes
	}
	return l
}

// CheckGroupSize refuses a group record over the limit.
func (l Limits) CheckGroupSize(g *gb.GroupSave) error {
	l = l.WithDefaults()
	if n := proto.Size(g); n > l.GroupBytes {
		return fieldErr("group", "%d bytes exceed the limit of %d for a group record", n, l.GroupBytes)
	}
	return nil
}

// MessageRecordBytes is the largest encoded message record the limits
// allow: its content and everything beside it.
func (l Limits) MessageRecordBytes() int {
	l = l.WithDefaults()
	return l.MessageContentBytes + l.MessageBytes
}

// CheckMessageSize refuses a message whose content, or whose fields beside
// its content, are over the limits. (A 16 MiB sender_inbox_id beside empty
// content is the second: the content's room is the content's.)
func (l Limits) CheckMessageSize(m *mb.GroupMessageSave) error {
	l = l.WithDefaults()
	content := len(m.GetDecryptedMessageBytes())
	if content > l.MessageContentBytes {
		return fieldErr("decrypted_message_bytes", "%d bytes exceed the limit of %d for message content", content, l.MessageContentBytes)
	}
	if n := proto.Size(m) - content; n > l.MessageBytes {
		return fieldErr("message", "%d bytes beside the content exceed the limit of %d for a message record's other fields", n, l.MessageBytes)
	}
	return nil
}

// CheckConsentSize refuses a consent record over the limit.
func (l Limits) CheckConsentSize(c *cs.ConsentSave) error {
	l = l.WithDefaults()
	if n := proto.Size(c); n > l.ConsentBytes {
		return fieldErr("record", "%d bytes exceed the limit of %d for a consent record", n, l.ConsentBytes)
	}
	return nil
}

// checkInboxText holds an owner or actor to the characters an inbox id may
// have: printable, in Unicode normal form C, and none of the invisible
// characters that make two different ids look alike: no whitespace, no
// control characters, no format characters (zero-width spaces and
// joiners, bidirectional overrides and isolates, the byte-order mark).
func checkInboxText(field, s string, max int) error {
	switch {
	case s == "":
		return fieldErr(field, "required")
	case len(s) > max:
		return fieldErr(field, "%d bytes exceed the limit of %d", len(s), max)
	case !utf8.ValidString(s):
		return fieldErr(field, "not valid UTF-8")
	}
	for i, r := range s {
		switch {
		case unicode.IsSpace(r):
			return fieldErr(field, "whitespace at byte %d", i)
		case unicode.IsControl(r):
			return fieldErr(field, "a control character at byte %d", i)
		case unicode.Is(unicode.Cf, r):
			return fieldErr(field, "an invisible format character U+%04X at byte %d (zero-width and bidirectional characters make look-alike ids)", r, i)
		case !unicode.IsPrint(r):
			return fieldErr(field, "a non-printable character U+%04X at byte %d", r, i)
		}
	}
	if !norm.NFC.IsNormalString(s) {
		return fieldErr(field, "not in Unicode normal form C; send it NFC-normalised so that one id has one spelling")
	}
	return nil
}

// CheckActor checks an inbox id a request acts as.
func CheckActor(field, actor string) error {
	return checkInboxText(field, actor, MaxActorBytes)
}
