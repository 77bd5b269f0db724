package sqlite

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/migrations"
)

// TestUpgradeToRowidGroups: a store written at schema 1 (groups WITHOUT
// ROWID, messages without the restored mark) opens at the latest schema
// with every record intact, groups in a rowid table, appends working and
// foreign keys still enforced.
func TestUpgradeToRowidGroups(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName)+"?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	if err := migrations.UpTo(t.Context(), db, migrations.SQLite, 1); err != nil {
		t.Fatal(err)
	}
	// Rows as the schema-1 binary wrote them.
	owner := "upgrade"
	g := &gb.GroupSave{Id: []byte("g"), CreatedAtNs: 5, MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP, AddedByInboxId: "someone"}
	if _, err := db.Exec(`INSERT INTO groups (owner, id, created_at_ns, membership_state, installations_last_checked, added_by_inbox_id, rotated_at_ns, conversation_type)
		VALUES (?, ?, 5, 1, 0, 'someone', 0, 1)`, owner, g.Id); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"m1", "m2", "m3"} {
		if _, err := db.Exec(`INSERT INTO messages (owner, id, group_id, decrypted_message_bytes, sent_at_ns, kind, sender_installation_id, sender_inbox_id, delivery_status, content_type_save, version_major, version_minor, authority_id, content_type)
			VALUES (?, ?, ?, x'78', ?, 1, x'', ?, 2, 0, 0, 0, '', '')`, owner, []byte(id), g.Id, i+1, owner); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	message := func(id string, group []byte, at int64) *mb.GroupMessageSave {
		return &mb.GroupMessageSave{Id: []byte(id), GroupId: group, SentAtNs: at, DecryptedMessageBytes: []byte("x"),
			Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION, SenderInboxId: owner,
			DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED}
	}
	msgs := []*mb.GroupMessageSave{message("m4", g.Id, 4)}

	s, err := Open(t.Context(), dir, Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetGroup(t.Context(), owner, g.Id)
	if err != nil || !proto.Equal(got, g) {
		t.Fatalf("group after the upgrade: %v %v", got, err)
	}
	page, err := s.ListMessages(t.Context(), owner, store.MessageQuery{GroupID: g.Id, Limit: 10})
	if err != nil || len(page.Messages) != 3 {
		t.Fatalf("messages after the upgrade: %d %v", len(page.Messages), err)
	}
	if _, err := s.AppendMessages(t.Context(), owner, msgs, store.AppendOptions{}); err != nil {
		t.Fatalf("an append after the upgrade: %v", err)
	}
	var ddl string
	if err := s.read.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'groups'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ddl, "WITHOUT ROWID") {
		t.Errorf("groups is still WITHOUT ROWID: %s", ddl)
	}
	orphan := message("orphan", []byte("no-such-group"), 1)
	if _, err := s.AppendMessages(t.Context(), owner, append(msgs[:0:0], orphan), store.AppendOptions{}); err == nil {
		t.Error("a message of a missing group was stored after the upgrade")
	}
	if _, err := s.write.Exec(`INSERT INTO messages (owner, id, group_id, decrypted_message_bytes, sent_at_ns, kind, sender_installation_id, sender_inbox_id, delivery_status, content_type_save, version_major, version_minor, authority_id, content_type)
		VALUES ('o', x'01', x'02', x'', 0, 0, x'', '', 0, 0, 0, 0, '', '')`); err == nil {
		t.Error("the foreign key from messages to groups is not enforced after the upgrade")
	}
}
