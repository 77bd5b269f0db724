//lint:file-ignore SA1019 content_type_save is retired but still stored, and made to agree with the envelope on export (ARCH-004, ARCH-008).

// Package records holds the rules about single records that every path
// into the store applies alike (the ConversationService and archive
// import): what a well-formed group, message and consent record is, the
// identifier fields a message's typed envelope decides (ARCH-008), and who
// may delete which message (CTYPE-018, PROC-037). It is pure: no I/O.
package records

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/fault"
)

// Limits on the parts of a record the store keys or indexes by. Content
// and metadata are bounded by the request size instead.
const (
	MaxOwnerBytes = 256
	MaxIDBytes    = 256
	// MaxEntityBytes bounds a consent entity, a key of the consent table:
	// Postgres refuses a b-tree index row past about 2.7 KB, so the
	// reference's unbounded entity stops here (the one exception).
	MaxEntityBytes = 2048
)

// FieldError is a request field that is wrong, named by its path in the
// request (messages[3].group_id).
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// FaultKind: the caller sent it.
func (e *FieldError) FaultKind() fault.Kind { return fault.Invalid }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// At prefixes the field of a FieldError with a path, leaving other errors
// as they are.
func At(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: prefix + "." + fe.Field, Reason: fe.Reason}
	}
	return err
}

// CheckOwner checks the owner every request names (see checkInboxText for
// the characters allowed).
func CheckOwner(owner string) error {
	return checkInboxText("owner", owner, MaxOwnerBytes)
}

// CheckID checks a group or message id.
func CheckID(field string, id []byte) error {
	switch {
	case len(id) == 0:
		return fieldErr(field, "required")
	case len(id) > MaxIDBytes:
		return fieldErr(field, "%d bytes exceed the limit of %d", len(id), MaxIDBytes)
	}
	return nil
}

// checkText rejects what a database text column cannot hold: NUL, which
// Postgres refuses, and invalid UTF-8.
func checkText(field, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return fieldErr(field, "contains a NUL character")
	}
	if !utf8.ValidString(s) {
		return fieldErr(field, "not valid UTF-8")
	}
	return nil
}

// checkEnum rejects a value the enum does not define; required also
// rejects the zero, UNSPECIFIED value.
func checkEnum(field string, e protoreflect.Enum, required bool) error {
	n := e.Number()
	if e.Descriptor().Values().ByNumber(n) == nil {
		return fieldErr(field, "%d is not a %s value", n, e.Descriptor().Name())
	}
	if required && n == 0 {
		return fieldErr(field, "required (not %s)", e.Descriptor().Values().ByNumber(0).Name())
	}
	return nil
}

// CheckGroup checks a group a caller puts. The Restored state is not the
// caller's to set: only import creates it (ARCH-015).
func CheckGroup(g *gb.GroupSave) error {
	if g == nil {
		return fieldErr("group", "required")
	}
	return At("group", checkLiveGroup(g))
}

func checkLiveGroup(g *gb.GroupSave) error {
	if err := CheckArchivedGroup(g); err != nil {
		return err
	}
	if g.GetMembershipState() == gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED {
		return fieldErr("membership_state", "RESTORED is set only by archive import")
	}
	return nil
}

// CheckArchivedGroup checks a group read from an archive: the archive's
// values are kept as they are (ARCH-020), unspecified ones included, but
// they must fit the store.
func CheckArchivedGroup(g *gb.GroupSave) error {
	if err := CheckID("id", g.GetId()); err != nil {
		return err
	}
	return checkGroupFields(g)
}

// The reference's import (libxmtp 1.11, @xmtp/wasm-bindings 1.11.0) is
// the rule for what a group may be here, since an export must restore
// there; interop/refrules_test.go holds each rule against it.
const (
	// groupIDBytes: the reference converts a group id to a 16-byte array
	// and refuses any other length ("could not convert slice to array"),
	// stopping its whole import there.
	groupIDBytes = 16
	// minDMIDBytes: the reference slices a DM id at bytes 3 and 67 (after
	// "dm:", the importing inbox's 64-character id) and, when that half is
	// its own id, from byte 68; a shorter id, or one with a character
	// across those bytes, panics the importing process. A 67-byte id
	// panics only where bytes 3-67 are the importer's id, which the server
	// cannot know, so 68 bytes is the shortest id taken here.
	minDMIDBytes = 68
)

// checkReferenceRules applies what the reference's import refuses or
// crashes on, so that no record stored here makes an export unrestorable.
func checkReferenceRules(g *gb.GroupSave) error {
	if len(g.GetId()) != groupIDBytes {
		return fieldErr("id", "%d bytes; a group id is %d bytes (the reference client refuses any other length on import)", len(g.GetId()), groupIDBytes)
	}
	if g.GetConversationType() == gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM {
		if g.DmId == nil {
			return fieldErr("dm_id", "required for a DM (the reference client refuses a DM without one on import)")
		}
		if err := checkDMID(g.GetDmId()); err != nil {
			return err
		}
	}
	if (g.MessageDisappearFromNs == nil) != (g.MessageDisappearInNs == nil) {
		return fieldErr("message_disappear_in_ns", "message_disappear_from_ns and message_disappear_in_ns are set together or not at all (the reference client drops a lone one, losing the setting)")
	}
	return nil
}

// RepairGroup returns a copy of g, a group the reference's import would
// refuse or lose part of, that the reference restores exactly as it would
// have restored g, and says what it changed; ok is false when no repair
// is lossless in that sense. The one such repair: a lone half of the
// disappearing pair is dropped, as the reference's import drops it (the
// restored conversation has no setting either way; finding 5 of the
// "restores in the reference" issue). A wrong id, a missing or malformed
// DM id cannot be repaired without inventing what the record never held.
func RepairGroup(g *gb.GroupSave) (repaired *gb.GroupSave, what string, ok bool) {
	lone := (g.MessageDisappearFromNs == nil) != (g.MessageDisappearInNs == nil)
	if !lone {
		return nil, "", false
	}
	r := proto.CloneOf(g)
	what = "dropped the lone message_disappear_from_ns, which the reference's import drops"
	if r.MessageDisappearInNs != nil {
		what = "dropped the lone message_disappear_in_ns, which the reference's import drops"
	}
	r.MessageDisappearFromNs, r.MessageDisappearInNs = nil, nil
	if CheckArchivedGroup(r) != nil {
		return nil, "", false
	}
	return r, what, true
}

// checkDMID checks a DM id against the byte offsets the reference slices
// it at: "dm:<inbox>:<inbox>" as the reference writes it, or any id at
// least 68 bytes long with a character boundary at bytes 3, 67 and 68.
func checkDMID(id string) error {
	if len(id) < minDMIDBytes {
		return fieldErr("dm_id", "%d bytes; a DM id is at least %d (\"dm:\" and two inbox ids, as the reference client writes it, which panics importing a shorter one)", len(id), minDMIDBytes)
	}
	for _, at := range [...]int{3, 67, 68} {
		if at < len(id) && !utf8.RuneStart(id[at]) {
			return fieldErr("dm_id", "a character crosses byte %d, where the reference client slices a DM id (it panics importing it)", at)
		}
	}
	return nil
}

func checkGroupFields(g *gb.GroupSave) error {
	texts := map[string]string{
		"added_by_inbox_id":         g.GetAddedByInboxId(),
		"dm_id":                     g.GetDmId(),
		"paused_for_version":        g.GetPausedForVersion(),
		"metadata.creator_inbox_id": g.GetMetadata().GetCreatorInboxId(),
	}
	for f, s := range texts {
		if err := checkText(f, s); err != nil {
			return err
		}
	}
	for k, v := range g.GetMutableMetadata().GetAttributes() {
		field := fmt.Sprintf("mutable_metadata.attributes[%q]", codec.Abbrev(k))
		if err := errors.Join(checkText(field, k), checkText(field, v)); err != nil {
			return err
		}
	}
	for i, s := range g.GetMutableMetadata().GetAdminList() {
		if err := checkText(fmt.Sprintf("mutable_metadata.admin_list[%d]", i), s); err != nil {
			return err
		}
	}
	for i, s := range g.GetMutableMetadata().GetSuperAdminList() {
		if err := checkText(fmt.Sprintf("mutable_metadata.super_admin_list[%d]", i), s); err != nil {
			return err
		}
	}
	// The reference's import (libxmtp 1.11) takes any membership state,
	// unspecified and values it does not define included (import makes a
	// new group Restored whatever it says), and refuses an unspecified or
	// undefined conversation type: ours does the same, so that a device's
	// archive loses nothing here and every group we store exports to it
	// (interop: TestReferenceRules_DifferentialGenerator).
	if err := checkEnum("conversation_type", g.GetConversationType(), true); err != nil {
		return err
	}
	return checkReferenceRules(g)
}

// CheckMessage checks a message a caller appends or an archive carries.
func CheckMessage(m *mb.GroupMessageSave) error {
	if m == nil {
		return fieldErr("message", "required")
	}
	if err := CheckID("id", m.GetId()); err != nil {
		return err
	}
	if err := CheckID("group_id", m.GetGroupId()); err != nil {
		return err
	}
	for _, f := range [...]struct{ name, value string }{
		{"sender_inbox_id", m.GetSenderInboxId()},
		{"authority_id", m.GetAuthorityId()},
		{"content_type", m.GetContentType()},
	} {
		if err := checkText(f.name, f.value); err != nil {
			return err
		}
	}
	// The reference's importer refuses a message of unspecified kind or
	// delivery status, stopping the whole import there: neither comes in
	// by any way, so none goes out in an export.
	if err := checkEnum("kind", m.GetKind(), true); err != nil {
		return err
	}
	if err := checkEnum("delivery_status", m.GetDeliveryStatus(), true); err != nil {
		return err
	}
	// content_type_save, retired, is stored as given whatever its value,
	// as the reference's import takes it (ARCH-004).
	// ARCH-019: a deadline is only known information.
	if m.ExpiresAtNs != nil && !m.GetExpiryKnown() {
		return fieldErr("expires_at_ns", "set while expiry_known is not true; a known deadline needs expiry_known true (ARCH-019)")
	}
	return nil
}

// CheckConsent checks a consent record.
func CheckConsent(c *cs.ConsentSave) error {
	if c == nil {
		return fieldErr("record", "required")
	}
	if err := checkEnum("entity_type", c.GetEntityType(), true); err != nil {
		return err
	}
	if err := checkEnum("state", c.GetState(), true); err != nil {
		return err
	}
	//lint:ignore SA1019 the deprecated value is named to refuse it, as the reference's import does
	if c.GetEntityType() == cs.ConsentTypeSave_CONSENT_TYPE_SAVE_ADDRESS {
		return fieldErr("entity_type", "ADDRESS is refused by the reference client's import (the field is deprecated there), which stops the whole import: record consent by INBOX_ID")
	}
	// Any entity the reference's import takes is taken, empty included,
	// up to the store's index bound.
	if e := c.GetEntity(); len(e) > MaxEntityBytes {
		return fieldErr("entity", "%d bytes exceed the limit of %d (the store indexes it)", len(e), MaxEntityBytes)
	}
	return checkText("entity", c.GetEntity())
}

// DeriveIdentifiers sets the four identifier fields of m from the type of
// its content when the content is a typed EncodedContent, whatever the
// fields or the retired content_type_save said; otherwise it leaves them
// as given and invents no type (ARCH-008). The content bytes are not
// touched.
func DeriveIdentifiers(m *mb.GroupMessageSave) {
	ec, err := codec.ParseEnvelope(m.GetDecryptedMessageBytes())
	if err != nil {
		return
	}
	t := ec.GetType()
	m.AuthorityId = t.GetAuthorityId()
	m.ContentType = t.GetTypeId()
	m.VersionMajor = int32(t.GetVersionMajor())
	m.VersionMinor = int32(t.GetVersionMinor())
}

// PrepareMessage makes m the record the store keeps and an export writes
// (its identifier fields derived from its envelope, ARCH-008), then checks
// that record, not the one the caller sent: the write path, Import and
// Verify apply the rules Export applies to what is stored, so a record
// the store takes always exports (a NUL in an envelope's type once went
// in unchecked and then stopped every export of its owner).
func PrepareMessage(m *mb.GroupMessageSave) error {
	if m == nil {
		return CheckMessage(m)
	}
	DeriveIdentifiers(m)
	return CheckMessage(m)
}

// legacyTypes are the retired content_type_save values of the catalogue
// types that had one, by type id under xmtp.org.
var legacyTypes = map[string]mb.ContentTypeSave{
	"text":                    mb.ContentTypeSave_CONTENT_TYPE_SAVE_TEXT,
	"group_membership_change": mb.ContentTypeSave_CONTENT_TYPE_SAVE_GROUP_MEMBERSHIP_CHANGE,
	"group_updated":           mb.ContentTypeSave_CONTENT_TYPE_SAVE_GROUP_UPDATED,
	"reaction":                mb.ContentTypeSave_CONTENT_TYPE_SAVE_REACTION,
	"readReceipt":             mb.ContentTypeSave_CONTENT_TYPE_SAVE_READ_RECEIPT,
	"reply":                   mb.ContentTypeSave_CONTENT_TYPE_SAVE_REPLY,
	"attachment":              mb.ContentTypeSave_CONTENT_TYPE_SAVE_ATTACHMENT,
	"remoteStaticAttachment":  mb.ContentTypeSave_CONTENT_TYPE_SAVE_REMOTE_ATTACHMENT,
	"transactionReference":    mb.ContentTypeSave_CONTENT_TYPE_SAVE_TRANSACTION_REFERENCE,
}

// GroupExportable is the eligibility table's group row: every group and
// DM, excluding sync and one-shot conversations (ARCH-010) and Restored
// ones (ARCH-026). The store reads it too: a group that stops being
// exportable leaves a tombstone, and one that becomes exportable brings
// its messages into the next increment.
func GroupExportable(g *gb.GroupSave) bool {
	switch g.GetConversationType() {
	case gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_SYNC, gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_ONESHOT:
		return false
	}
	return g.GetMembershipState() != gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED
}

// ExportForm is m as an export writes it: the retired content_type_save
// agrees with the message's type or is left unset. The reference's
// import reads that enum before the type string, so a disagreeing value
// (stored as given, ARCH-004) would list a text message as an attachment
// there; ARCH-008 makes the envelope's type the message's, and the
// reference's own exporter leaves the enum at its default. The type is
// the envelope's for typed content and the stored content_type for
// content that is not a typed envelope (raw bytes, an envelope without a
// type): a disagreeing enum is left out for both, and for records stored
// before this rule, since it applies on the way out.
func ExportForm(m *mb.GroupMessageSave) {
	cts := m.GetContentTypeSave()
	if cts == mb.ContentTypeSave_CONTENT_TYPE_SAVE_UNSPECIFIED {
		return
	}
	authority, typeID := m.GetAuthorityId(), m.GetContentType()
	if ec, err := codec.ParseEnvelope(m.GetDecryptedMessageBytes()); err == nil && ec.GetType() != nil {
		// The stored identifier fields were derived from this type on
		// write (store.Derive): the envelope's type is read once, here.
		authority, typeID = ec.GetType().GetAuthorityId(), ec.GetType().GetTypeId()
	} else if authority == "" {
		// Untyped content names no authority of its own; its stored
		// type string is what the reference falls back to.
		authority = "xmtp.org"
	}
	if want, ok := legacyTypes[typeID]; ok && authority == "xmtp.org" && want == cts {
		return
	}
	m.ContentTypeSave = mb.ContentTypeSave_CONTENT_TYPE_SAVE_UNSPECIFIED
}

// TypeOf is the content type a stored message's identifier fields name.
func TypeOf(m *mb.GroupMessageSave) codec.TypeID {
	return codec.TypeID{
		Authority: m.GetAuthorityId(),
		Type:      m.GetContentType(),
		Major:     uint32(m.GetVersionMajor()),
		Minor:     uint32(m.GetVersionMinor()),
	}
}

// Deletion refusals, told apart with errors.Is.
var (
	// ErrNotDeletable: CTYPE-018 forbids deleting the target, whoever asks.
	ErrNotDeletable = fault.NewReason(fault.FailedPrecondition, fault.ReasonNotDeletable, "not deletable")
	// ErrNotAuthorized: PROC-037: the actor is neither the target's sender
	// nor a current super admin of its group.
	ErrNotAuthorized = fault.NewReason(fault.PermissionDenied, fault.ReasonNotSenderOrSuperAdmin, "not authorized to delete")
)

// CheckDeletion decides whether actor may delete target in group.
//
// CTYPE-018: the target must be an application message whose identifier is
// a catalogue type marked Deletable; transcripts, unknown, custom and
// reserved types, and types marked no, are refused regardless of who asks.
// The identifier is the target's content type, derived from its envelope
// when it has one (ARCH-008).
//
// PROC-037: the actor must be the target's sender or a current super admin
// of the group. A Restored group's admin lists are history from an
// archive, not current authority (section 4 of the archive spec), so there
// only the sender may delete.
func CheckDeletion(target *mb.GroupMessageSave, group *gb.GroupSave, actor string) error {
	if target.GetKind() != mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION {
		return fmt.Errorf("message %x is a %s message, not an application message (CTYPE-018): %w", target.GetId(), target.GetKind(), ErrNotDeletable)
	}
	t := TypeOf(target)
	if !codec.Deletable(t) {
		return fmt.Errorf("message %x has content type %s, which CTYPE-018 does not allow deleting: %w", target.GetId(), describe(t), ErrNotDeletable)
	}
	if actor == target.GetSenderInboxId() && actor != "" {
		return nil
	}
	if group.GetMembershipState() != gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED {
		for _, s := range group.GetMutableMetadata().GetSuperAdminList() {
			if s == actor {
				return nil
			}
		}
	}
	return fmt.Errorf("inbox %q is neither the sender of message %x nor a current super admin of its group (PROC-037): %w", actor, target.GetId(), ErrNotAuthorized)
}

// describe names a type for an error message, saying why it is refused.
func describe(t codec.TypeID) string {
	if t.Authority == "" && t.Type == "" {
		return "unknown (the content is not a typed envelope)"
	}
	e, ok := codec.Catalogue(t)
	switch {
	case !ok:
		return t.String() + " (not in the catalogue)"
	case e.Transcript:
		return t.String() + " (a commit transcript)"
	case e.Reserved:
		return t.String() + " (reserved)"
	default:
		return t.String() + " (marked Deletable: no)"
	}
}

// MaxConsentFutureSkew is how far ahead of the server's clock a consent
// record written through the API may be dated. Consent merges by the
// greater consented_at_ns, so a record dated years ahead would pin its
// state against every later change.
const MaxConsentFutureSkew = time.Hour

// CheckConsentTime refuses a consent record dated more than
// MaxConsentFutureSkew after now.
func CheckConsentTime(c *cs.ConsentSave, now time.Time) error {
	if limit := now.Add(MaxConsentFutureSkew).UnixNano(); c.GetConsentedAtNs() > limit {
		return fieldErr("consented_at_ns", "%d is more than %s ahead of the server's clock; consent cannot be dated in the future", c.GetConsentedAtNs(), MaxConsentFutureSkew)
	}
	return nil
}
