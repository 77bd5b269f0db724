package interop

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/jobs/jobstest"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

// TestReferenceImportsEachIncrement: a full backup and three increments,
// each since the one before, and each imports alone in a fresh reference
// client: every message it holds arrives, with the groups they belong to
// (the reference refuses a message whose group it lacks), and nothing of
// an earlier member. The increments hold a message sent before all others
// but stored late, a consent change, and a group created after the full.
func TestReferenceImportsEachIncrement(t *testing.T) {
	conn, dir := serveJobs(t)
	ctx := t.Context()
	owner := inboxID("chain owner")
	conv := cb.NewConversationServiceClient(conn)
	newGroup := func(name string) *gb.GroupSave {
		g := &gb.GroupSave{
			Id: id32(name)[:16], CreatedAtNs: 1_700_000_000_000_000_000, MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
			ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP, AddedByInboxId: owner,
			Metadata:        &gb.ImmutableMetadataSave{CreatorInboxId: owner},
			MutableMetadata: &gb.MutableMetadataSave{Attributes: map[string]string{"group_name": name}, SuperAdminList: []string{owner}},
		}
		if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
			t.Fatal(err)
		}
		return g
	}
	env, err := codec.NewRegistry().Encode(codec.TypeText, "a link of the chain")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := proto.Marshal(env)
	add := func(g *gb.GroupSave, label string, n int, sentAt int64) []string {
		var ids []string
		var msgs []*mb.GroupMessageSave
		for i := range n {
			m := &mb.GroupMessageSave{
				Id: id32(fmt.Sprintf("%s %d", label, i)), GroupId: g.Id, DecryptedMessageBytes: text,
				SentAtNs: sentAt + int64(i), Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION,
				SenderInstallationId: id32("installation"), SenderInboxId: owner,
				DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED, ExpiryKnown: proto.Bool(true),
			}
			msgs = append(msgs, m)
			ids = append(ids, hex.EncodeToString(m.Id))
		}
		if _, err := conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	const t0 = 1_700_000_000_000_000_100
	var first, second, third *gb.GroupSave
	hexID := func(g *gb.GroupSave) string { return hex.EncodeToString(g.Id) }
	// Each step writes its changes and says what the member exported after
	// them must hold, and only that.
	steps := []struct {
		name   string
		write  func() (messages, groups []string)
		denies bool
	}{
		{"full", func() ([]string, []string) {
			first, second = newGroup("first"), newGroup("second")
			return append(add(first, "full a", 10, t0+1000), add(second, "full b", 5, t0+2000)...), []string{hexID(first), hexID(second)}
		}, false},
		{"increment 1: new messages in one group", func() ([]string, []string) {
			return add(first, "inc1", 5, t0+5000), []string{hexID(first)}
		}, false},
		{"increment 2: a message sent before all others, stored late, and a consent change", func() ([]string, []string) {
			late := add(second, "inc2 late", 1, t0) // sent before every other message
			if _, err := conv.SetConsent(ctx, &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{{
				EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED,
				Entity: inboxID("a stranger"), ConsentedAtNs: t0,
			}}}); err != nil {
				t.Fatal(err)
			}
			return late, []string{hexID(second)}
		}, true},
		{"increment 3: a group created after the full", func() ([]string, []string) {
			third = newGroup("third")
			return add(third, "inc3", 3, t0+9000), []string{hexID(third)}
		}, false},
	}
	backups := cb.NewBackupServiceClient(conn)
	since := ""
	for _, step := range steps {
		wantMsgs, wantGroups := step.write()
		op, err := backups.StartExport(ctx, &cb.StartExportRequest{Owner: owner, Label: step.name, SinceBackup: since})
		if err != nil {
			t.Fatal(err)
		}
		op = waitOperation(t, conn, op)
		result := &cb.ExportJobResult{}
		if op.GetError() != nil || op.GetResponse().UnmarshalTo(result) != nil {
			t.Fatalf("%s: export job: %v", step.name, op)
		}
		since = result.GetBackup()
		key, err := backups.GetBackupKey(ctx, &cb.GetBackupKeyRequest{Owner: owner, Backup: result.GetBackup()})
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(result.GetArchive().GetKey())))
		if err != nil {
			t.Fatal(err)
		}
		var view refArchiveView
		query := []map[string]any{{"entityType": jsConsentInboxID, "entity": inboxID("a stranger")}}
		runScript(t, "archive.mjs", "import", map[string]any{"key": hex.EncodeToString(key.GetKey()), "archive": hex.EncodeToString(data), "consent": query}, &view)
		var gotGroups, gotMsgs []string
		for _, c := range view.Conversations {
			gotGroups = append(gotGroups, c.ID)
		}
		for _, m := range view.Messages {
			gotMsgs = append(gotMsgs, m.ID)
		}
		slices.Sort(gotGroups)
		slices.Sort(wantGroups)
		if !slices.Equal(gotGroups, wantGroups) {
			t.Errorf("%s: the reference restored conversations %v, want %v", step.name, gotGroups, wantGroups)
		}
		for _, id := range wantMsgs {
			if !slices.Contains(gotMsgs, id) {
				t.Errorf("%s: message %s did not arrive in the reference", step.name, id)
			}
		}
		if uint64(len(wantMsgs)) != result.GetSummary().GetMessages() {
			t.Errorf("%s: the member holds %d messages, want exactly its %d changes", step.name, result.GetSummary().GetMessages(), len(wantMsgs))
		}
		// The stranger is denied once the member holding the change is
		// imported, and unknown to the reference before.
		denied := len(view.Consent) == 1 && view.Consent[0].State == jsConsentDenied
		if denied != step.denies {
			t.Errorf("%s: the reference's consent for the stranger is %+v; denied %v, want %v", step.name, view.Consent, denied, step.denies)
		}
	}
}

// serveJobs serves a server with backup jobs over temporary directories
// (a local key-encryption key, the file bucket "local"); dir is the
// bucket's.
func serveJobs(t *testing.T) (conn *grpc.ClientConn, dir string) {
	t.Helper()
	jc, dir := jobstest.Local(t)
	cfg := server.Config{Store: enginetest.SQLite(t)}
	server.AttachJobs(&cfg, jc)
	return serve(t, cfg), dir
}

func waitOperation(t *testing.T, conn *grpc.ClientConn, op *longrunningpb.Operation) *longrunningpb.Operation {
	t.Helper()
	var err error
	for deadline := time.Now().Add(time.Minute); !op.GetDone() && time.Now().Before(deadline); {
		if op, err = longrunningpb.NewOperationsClient(conn).WaitOperation(t.Context(), &longrunningpb.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(10 * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	return op
}
