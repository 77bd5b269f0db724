package store

//lint:file-ignore SA1019 content_type_save is retired but still stored and returned as given (ARCH-004, ARCH-008).

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// The column lists and row mappings the SQL engines share. Both schemas
// (migrations/postgres, migrations/sqlite) name the same columns, so a
// record is stored the same way in each and only the SQL around it
// differs.

// GroupColumns are the groups table's columns after owner, in the order of
// GroupArgs and GroupRow.Dest.
const GroupColumns = `id, created_at_ns, membership_state, installations_last_checked,
	added_by_inbox_id, welcome_id, rotated_at_ns, conversation_type, dm_id,
	last_message_ns, message_disappear_from_ns, message_disappear_in_ns,
	creator_inbox_id, attributes, admin_list, super_admin_list, paused_for_version`

// GroupColumnCount is how many columns GroupColumns names.
const GroupColumnCount = 17

// MessageColumns are the messages table's columns after owner, in the
// order of MessageArgs and MessageRow.Dest.
const MessageColumns = `id, group_id, decrypted_message_bytes, sent_at_ns, kind,
	sender_installation_id, sender_inbox_id, delivery_status, content_type_save,
	version_major, version_minor, authority_id, reference_id, sequence_id,
	originator_id, content_type, expires_at_ns, expiry_known`

// MessageColumnCount is how many columns MessageColumns names.
const MessageColumnCount = 18

// MessageInsertColumns are what an append writes: MessageColumns,
// whether the message came in by archive import (ARCH-009), and the
// owner's change sequence the write stamps it with.
const MessageInsertColumns = MessageColumns + `, restored, change_seq`

// MessageInsertColumnCount is how many columns MessageInsertColumns names.
const MessageInsertColumnCount = MessageColumnCount + 2

// NextChangeSQL raises the owner's change sequence and returns its new
// value: the first statement of every write transaction that adds or
// changes a group, message or consent record, whose rows it then stamps
// (migrations' change_sequence explains why first). Its one parameter is
// the owner, written "?".
const NextChangeSQL = `INSERT INTO owner_changes (owner, seq) VALUES (?, 1)
	ON CONFLICT (owner) DO UPDATE SET seq = owner_changes.seq + 1 RETURNING seq`

// ChangeSeqSQL reads the owner's change sequence (no row: 0), with the
// owner as its one parameter, written "?".
const ChangeSeqSQL = `SELECT seq FROM owner_changes WHERE owner = ?`

// GroupArgs returns the column values of g, in GroupColumns order.
// An absent metadata message is a NULL creator; an absent mutable metadata
// message is NULL lists, so a record reads back exactly as written.
func GroupArgs(g *gb.GroupSave) ([]any, error) {
	var creator *string
	if g.Metadata != nil {
		c := g.Metadata.GetCreatorInboxId()
		creator = &c
	}
	var attrs, admins, supers *string
	if mm := g.MutableMetadata; mm != nil {
		var err error
		if attrs, err = jsonText(mm.GetAttributes(), map[string]string{}); err != nil {
			return nil, fmt.Errorf("mutable_metadata.attributes: %w", err)
		}
		if admins, err = jsonText(mm.GetAdminList(), []string{}); err != nil {
			return nil, fmt.Errorf("mutable_metadata.admin_list: %w", err)
		}
		if supers, err = jsonText(mm.GetSuperAdminList(), []string{}); err != nil {
			return nil, fmt.Errorf("mutable_metadata.super_admin_list: %w", err)
		}
	}
	return []any{
		g.GetId(), g.GetCreatedAtNs(), int32(g.GetMembershipState()), g.GetInstallationsLastChecked(),
		g.GetAddedByInboxId(), g.WelcomeId, g.GetRotatedAtNs(), int32(g.GetConversationType()), g.DmId,
		g.LastMessageNs, g.MessageDisappearFromNs, g.MessageDisappearInNs,
		creator, attrs, admins, supers, g.PausedForVersion,
	}, nil
}

// jsonText marshals v, or empty when v is nil, to JSON text.
func jsonText[T any](v T, empty T) (*string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		b, _ = json.Marshal(empty)
	}
	s := string(b)
	return &s, nil
}

// GroupRow receives one scanned groups row.
type GroupRow struct {
	g                        gb.GroupSave
	membership, convType     int32
	creator                  *string
	attrs, admins, superList *string
}

// Dest returns the scan destinations, in GroupColumns order.
func (r *GroupRow) Dest() []any {
	g := &r.g
	return []any{
		&g.Id, &g.CreatedAtNs, &r.membership, &g.InstallationsLastChecked,
		&g.AddedByInboxId, &g.WelcomeId, &g.RotatedAtNs, &r.convType, &g.DmId,
		&g.LastMessageNs, &g.MessageDisappearFromNs, &g.MessageDisappearInNs,
		&r.creator, &r.attrs, &r.admins, &r.superList, &g.PausedForVersion,
	}
}

// Group builds the record from the scanned row.
func (r *GroupRow) Group() (*gb.GroupSave, error) {
	g := &gb.GroupSave{
		Id: r.g.Id, CreatedAtNs: r.g.CreatedAtNs, InstallationsLastChecked: r.g.InstallationsLastChecked,
		AddedByInboxId: r.g.AddedByInboxId, WelcomeId: r.g.WelcomeId, RotatedAtNs: r.g.RotatedAtNs,
		DmId: r.g.DmId, LastMessageNs: r.g.LastMessageNs, MessageDisappearFromNs: r.g.MessageDisappearFromNs,
		MessageDisappearInNs: r.g.MessageDisappearInNs, PausedForVersion: r.g.PausedForVersion,
		MembershipState:  gb.GroupMembershipStateSave(r.membership),
		ConversationType: gb.ConversationTypeSave(r.convType),
	}
	if r.creator != nil {
		g.Metadata = &gb.ImmutableMetadataSave{CreatorInboxId: *r.creator}
	}
	if r.attrs != nil || r.admins != nil || r.superList != nil {
		mm := &gb.MutableMetadataSave{}
		if err := jsonField(r.attrs, &mm.Attributes); err != nil {
			return nil, fmt.Errorf("group %x: attributes: %w", g.Id, err)
		}
		if err := jsonField(r.admins, &mm.AdminList); err != nil {
			return nil, fmt.Errorf("group %x: admin_list: %w", g.Id, err)
		}
		if err := jsonField(r.superList, &mm.SuperAdminList); err != nil {
			return nil, fmt.Errorf("group %x: super_admin_list: %w", g.Id, err)
		}
		if len(mm.Attributes) == 0 {
			mm.Attributes = nil
		}
		if len(mm.AdminList) == 0 {
			mm.AdminList = nil
		}
		if len(mm.SuperAdminList) == 0 {
			mm.SuperAdminList = nil
		}
		g.MutableMetadata = mm
	}
	return g, nil
}

func jsonField(s *string, dst any) error {
	if s == nil {
		return nil
	}
	return json.Unmarshal([]byte(*s), dst)
}

// MessageArgs returns the column values of m, in MessageColumns order.
func MessageArgs(m *mb.GroupMessageSave) []any {
	return []any{
		m.GetId(), m.GetGroupId(), notNil(m.GetDecryptedMessageBytes()), m.GetSentAtNs(), int32(m.GetKind()),
		notNil(m.GetSenderInstallationId()), m.GetSenderInboxId(), int32(m.GetDeliveryStatus()), int32(m.GetContentTypeSave()),
		m.GetVersionMajor(), m.GetVersionMinor(), m.GetAuthorityId(), m.ReferenceId, m.SequenceId,
		m.OriginatorId, m.GetContentType(), m.ExpiresAtNs, m.ExpiryKnown,
	}
}

// MessageInsertArgs are the values of MessageInsertColumns.
func MessageInsertArgs(m *mb.GroupMessageSave, restored bool, changeSeq int64) []any {
	return append(MessageArgs(m), restored, changeSeq)
}

// notNil makes a NOT NULL bytes column's value an empty slice, never NULL.
func notNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// MessageRow receives one scanned messages row. Use a new row for each
// scan: both drivers copy bytes into the destinations they are given, so
// the record takes the row's slices without another copy.
type MessageRow struct {
	m                             mb.GroupMessageSave
	kind, status, contentTypeSave int32
	// A pointer, so that NULL (absent) and an empty value (present) stay
	// apart whatever a driver makes of an empty blob in a plain []byte.
	referenceID *[]byte
	// The optional numbers land here and the record points at them: into
	// a **int64 a driver allocates the int64, once a column a row.
	sequenceID, originatorID, expiresAtNs sql.Null[int64]
	expiryKnown                           sql.Null[bool]
}

// Dest returns the scan destinations, in MessageColumns order.
func (r *MessageRow) Dest() []any { return r.DestInto(nil) }

// DestInto is Dest reusing dest's array when it has room: a loop over
// rows fills one slice again rather than allocating one a row.
func (r *MessageRow) DestInto(dest []any) []any {
	m := &r.m
	return append(dest[:0],
		&m.Id, &m.GroupId, &m.DecryptedMessageBytes, &m.SentAtNs, &r.kind,
		&m.SenderInstallationId, &m.SenderInboxId, &r.status, &r.contentTypeSave,
		&m.VersionMajor, &m.VersionMinor, &m.AuthorityId, &r.referenceID, &r.sequenceID,
		&r.originatorID, &m.ContentType, &r.expiresAtNs, &r.expiryKnown,
	)
}

// present points at n's value when it is set.
func present[T any](n *sql.Null[T]) *T {
	if !n.Valid {
		return nil
	}
	return &n.V
}

// Message returns the record of the scanned row; the row is spent.
func (r *MessageRow) Message() *mb.GroupMessageSave {
	m := &r.m
	m.Kind = mb.GroupMessageKindSave(r.kind)
	m.DeliveryStatus = mb.DeliveryStatusSave(r.status)
	m.ContentTypeSave = mb.ContentTypeSave(r.contentTypeSave)
	m.SequenceId, m.OriginatorId = present[int64](&r.sequenceID), present[int64](&r.originatorID)
	m.ExpiresAtNs, m.ExpiryKnown = present[int64](&r.expiresAtNs), present[bool](&r.expiryKnown)
	if r.referenceID != nil {
		m.ReferenceId = *r.referenceID
		if m.ReferenceId == nil {
			m.ReferenceId = []byte{} // present, and empty
		}
	}
	return m
}

// MessageSelect is the query of a MessageQuery over the messages table, in
// send order, with placeholder(i) writing the i-th parameter (1-based) in
// the engine's dialect: "$1" or "?".
func MessageSelect(owner string, q MessageQuery, placeholder func(int) string) (string, []any) {
	args := []any{owner, q.GroupID}
	arg := func(v any) string { args = append(args, v); return placeholder(len(args)) }
	var b strings.Builder
	b.WriteString(`SELECT ` + MessageColumns + ` FROM messages WHERE owner = ` + placeholder(1) + ` AND group_id = ` + placeholder(2))
	if q.StartNs != nil {
		b.WriteString(` AND sent_at_ns > ` + arg(*q.StartNs))
	}
	if q.EndNs != nil {
		b.WriteString(` AND sent_at_ns <= ` + arg(*q.EndNs))
	}
	if q.After != nil {
		b.WriteString(` AND (sent_at_ns, id) > (` + arg(q.After.SentAtNs) + `, ` + arg(q.After.ID) + `)`)
	}
	if q.ExcludeRestoredUnknownExpiry {
		b.WriteString(` AND NOT (restored AND expiry_known IS NOT TRUE)`)
	}
	if q.LiveAtNs != 0 {
		b.WriteString(` AND (expires_at_ns IS NULL OR expires_at_ns > ` + arg(q.LiveAtNs) + `)`)
	}
	if q.ChangedAfter != nil {
		b.WriteString(` AND change_seq > ` + arg(*q.ChangedAfter))
	}
	b.WriteString(` ORDER BY sent_at_ns, id`)
	if q.Limit > 0 {
		b.WriteString(` LIMIT ` + arg(q.Limit))
	}
	return b.String(), args
}

// GroupSelect is the query of a ListGroups page (the owner's groups after
// id after, in id order), with placeholder(i) writing the i-th parameter.
// With changedAfter set it keeps the groups changed after that point of
// the owner's change sequence, and those holding a message that was: an
// increment carries the group of every message it carries, since an
// importer refuses a message whose group it lacks.
func GroupSelect(owner string, after []byte, limit int, changedAfter *int64, placeholder func(int) string) (string, []any) {
	args := []any{owner}
	var b strings.Builder
	b.WriteString(`SELECT ` + GroupColumns + ` FROM groups WHERE owner = ` + placeholder(1))
	if after != nil {
		args = append(args, after)
		b.WriteString(` AND id > ` + placeholder(len(args)))
	}
	if changedAfter != nil {
		// Each value again where it is used: "?" placeholders are
		// positional. The subquery names the owner itself, not through
		// groups.owner: Citus routes a statement to one shard only when
		// every table in it is filtered by the owner's value (issue 35's
		// router-plan test).
		args = append(args, *changedAfter, owner, *changedAfter)
		b.WriteString(` AND (change_seq > ` + placeholder(len(args)-2) + ` OR EXISTS (SELECT 1 FROM messages m WHERE m.owner = ` + placeholder(len(args)-1) +
			` AND m.group_id = groups.id AND m.change_seq > ` + placeholder(len(args)) + `))`)
	}
	args = append(args, limit)
	b.WriteString(` ORDER BY id LIMIT ` + placeholder(len(args)))
	return b.String(), args
}
