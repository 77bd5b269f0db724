package interop

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// TestReferenceImportsOurBackupJob: a backup a job wrote, sealed with its
// own data key, imports in the reference client with the key that
// GetBackupKey hands out: every conversation and message arrives.
func TestReferenceImportsOurBackupJob(t *testing.T) {
	conn, dir := serveJobs(t)
	ctx := t.Context()
	owner := inboxID("job owner")
	group := &gb.GroupSave{
		Id: id32("job group")[:16], CreatedAtNs: 1_700_000_000_000_000_000, MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP, AddedByInboxId: owner,
		Metadata:        &gb.ImmutableMetadataSave{CreatorInboxId: owner},
		MutableMetadata: &gb.MutableMetadataSave{Attributes: map[string]string{"group_name": "Backed up"}, SuperAdminList: []string{owner}},
	}
	conv := cb.NewConversationServiceClient(conn)
	if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: group}); err != nil {
		t.Fatal(err)
	}
	env, err := codec.NewRegistry().Encode(codec.TypeText, "hello from a backup")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := proto.Marshal(env)
	want := map[string]bool{}
	var msgs []*mb.GroupMessageSave
	for i := range 20 {
		m := &mb.GroupMessageSave{
			Id: id32("job message " + string(rune('a'+i))), GroupId: group.Id, DecryptedMessageBytes: text,
			SentAtNs: 1_700_000_000_000_000_010 + int64(i), Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION,
			SenderInstallationId: id32("installation"), SenderInboxId: owner,
			DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED, ExpiryKnown: proto.Bool(true),
		}
		msgs = append(msgs, m)
		want[hex.EncodeToString(m.Id)] = true
	}
	if _, err := conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: msgs}); err != nil {
		t.Fatal(err)
	}

	backups := cb.NewBackupServiceClient(conn)
	op, err := backups.StartExport(ctx, &cb.StartExportRequest{Owner: owner, Label: "for a device"})
	if err != nil {
		t.Fatal(err)
	}
	op = waitOperation(t, conn, op)
	result := &cb.ExportJobResult{}
	if op.GetError() != nil || op.GetResponse().UnmarshalTo(result) != nil {
		t.Fatalf("export job: %v", op)
	}
	key, err := backups.GetBackupKey(ctx, &cb.GetBackupKeyRequest{Owner: owner, Backup: result.GetBackup()})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(result.GetArchive().GetKey())))
	if err != nil {
		t.Fatal(err)
	}
	var view refArchiveView
	runScript(t, "archive.mjs", "import", map[string]any{"key": hex.EncodeToString(key.GetKey()), "archive": hex.EncodeToString(data)}, &view)
	if len(view.Conversations) != 1 || view.Conversations[0].ID != hex.EncodeToString(group.Id) || view.Conversations[0].MembershipState != jsMembershipRestored {
		t.Errorf("the reference restored %+v; want the one group, restored", view.Conversations)
	}
	got := 0
	for _, m := range view.Messages {
		if want[m.ID] {
			got++
		}
	}
	if got != len(want) {
		t.Errorf("the reference imported %d of our %d messages", got, len(want))
	}
}
