package interop

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// refOutcome is what the reference's import made of an archive: the view
// when it finished, or how it failed.
type refOutcome struct {
	view refArchiveView
	// failed: the import threw or the process died (a panic in the wasm
	// module ends the process); stderr says which.
	failed bool
	stderr string
}

// sentinel is a group and a message written after the record under test:
// present after the import means the reference went on past the record.
var sentinelGroup = &gb.GroupSave{Id: id32("sentinel group")[:16], CreatedAtNs: 1_700_000_000_000_000_000,
	MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED, ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP,
	Metadata: &gb.ImmutableMetadataSave{CreatorInboxId: inboxID("sentinel")}}

// referenceImports seals elements (after the metadata) and the sentinel
// into an archive and imports it in the reference.
func referenceImports(t *testing.T, elements ...*ds.BackupElement) refOutcome {
	t.Helper()
	var buf bytes.Buffer
	w, err := archive.NewWriter(&buf, interopKey, archive.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	meta := &ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{
		Elements:     []ds.BackupElementSelection{ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_MESSAGES, ds.BackupElementSelection_BACKUP_ELEMENT_SELECTION_CONSENT},
		ExportedAtNs: 1_700_000_000_000_000_000}}}
	env, _ := codec.NewRegistry().Encode(codec.TypeText, "sentinel")
	text, _ := proto.Marshal(env)
	sentinelMsg := &mb.GroupMessageSave{Id: id32("sentinel message"), GroupId: sentinelGroup.Id, DecryptedMessageBytes: text, SentAtNs: 1_700_000_000_000_000_001,
		Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION, SenderInboxId: inboxID("sentinel"), SenderInstallationId: id32("i"),
		DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED}
	all := append([]*ds.BackupElement{meta}, elements...)
	all = append(all, &ds.BackupElement{Element: &ds.BackupElement_Group{Group: sentinelGroup}},
		&ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: sentinelMsg}})
	for _, el := range all {
		if err := w.WriteElement(el); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]any{"key": hex.EncodeToString(interopKey), "archive": hex.EncodeToString(buf.Bytes())})
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@xmtp", "wasm-bindings")); err != nil {
		t.Fatalf("run make interop-deps: %v", err)
	}
	cmd := exec.Command(node, "archive.mjs", "import")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return refOutcome{failed: true, stderr: stderr.String()}
	}
	var o refOutcome
	if err := json.Unmarshal(out, &o.view); err != nil {
		t.Fatalf("archive.mjs output: %v\n%s", err, out)
	}
	return o
}

// kept reports whether the reference imported the sentinel message.
func (o refOutcome) kept() bool {
	for _, m := range o.view.Messages {
		if m.ID == hex.EncodeToString(id32("sentinel message")) {
			return true
		}
	}
	return false
}

func groupEl(g *gb.GroupSave) *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_Group{Group: g}}
}

func consentEl(c *cs.ConsentSave) *ds.BackupElement {
	return &ds.BackupElement{Element: &ds.BackupElement_Consent{Consent: c}}
}

func dmWithID(id string) *gb.GroupSave {
	g := &gb.GroupSave{Id: id32("dm " + id)[:16], CreatedAtNs: 1_700_000_000_000_000_000,
		MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED, ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM,
		Metadata: &gb.ImmutableMetadataSave{CreatorInboxId: inboxID("peer")}}
	g.DmId = proto.String(id)
	return g
}

// TestReferenceRules_ImportDecides: each record shape the reference's
// import refuses, crashes on or silently loses (the numbered findings of
// the "restores in the reference" issue) is imported by the reference
// itself here, to show its outcome, and sent through our write path,
// which refuses it with INVALID_ARGUMENT naming the field; the shape just
// inside each rule goes through both. An archive of ours can therefore
// never hold a record that stops the reference's import.
func TestReferenceRules_ImportDecides(t *testing.T) {
	svc := startServices(t)
	owner := inboxID("rules owner")
	a64, b64 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	noDMID := dmWithID("")
	noDMID.DmId = nil
	lone := proto.Clone(sentinelGroup).(*gb.GroupSave)
	lone.Id = id32("lone disappearing")[:16]
	lone.MessageDisappearFromNs = proto.Int64(1_700_000_000_000_000_000)
	pair := proto.Clone(lone).(*gb.GroupSave)
	pair.Id = id32("paired disappearing")[:16]
	pair.MessageDisappearInNs = proto.Int64(86_400_000_000_000)
	groupOfID := func(n int) *gb.GroupSave {
		g := proto.Clone(sentinelGroup).(*gb.GroupSave)
		g.Id = bytes.Repeat([]byte{byte(n)}, n)
		return g
	}
	consent := func(typ cs.ConsentTypeSave, entity string) *cs.ConsentSave {
		return &cs.ConsentSave{EntityType: typ, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, Entity: entity, ConsentedAtNs: 1}
	}
	cases := []struct {
		name string
		// one of group, consent
		group   *gb.GroupSave
		consent *cs.ConsentSave
		// refused: the reference's import stops (throws, or its process
		// dies) at the record; we refuse it naming field. "" for a shape
		// both accept.
		field string
	}{
		{name: "finding 1: empty dm_id (panics)", group: dmWithID(""), field: "dm_id"},
		{name: "finding 1: dm:short (panics)", group: dmWithID("dm:short"), field: "dm_id"},
		{name: "finding 1: 66-byte dm_id (panics)", group: dmWithID("dm:" + a64[:63]), field: "dm_id"},
		{name: "finding 1: a character across byte 3 (panics)", group: dmWithID("dm\u00e9" + a64 + ":" + b64), field: "dm_id"},
		{name: "finding 1: a character across byte 67 (panics)", group: dmWithID("dm:" + a64[:63] + "\u00e9:" + b64), field: "dm_id"},
		{name: "finding 2: a DM without dm_id (refused)", group: noDMID, field: "dm_id"},
		{name: "finding 3: a 1-byte group id (refused)", group: groupOfID(1), field: "id"},
		{name: "finding 3: a 15-byte group id (refused)", group: groupOfID(15), field: "id"},
		{name: "finding 3: a 17-byte group id (refused)", group: groupOfID(17), field: "id"},
		{name: "finding 3: a 32-byte group id (refused)", group: groupOfID(32), field: "id"},
		{name: "finding 3: a 256-byte group id (refused)", group: groupOfID(256), field: "id"},
		{name: "inside: a 16-byte group id", group: groupOfID(16)},
		//lint:ignore SA1019 the deprecated value is the shape under test
		{name: "finding 4: consent of type ADDRESS (refused)", consent: consent(cs.ConsentTypeSave_CONSENT_TYPE_SAVE_ADDRESS, "0x0000000000000000000000000000000000000001"), field: "entity_type"},
		{name: "inside: the reference's own DM id form", group: dmWithID("dm:" + a64 + ":" + b64)},
		{name: "inside: a 68-byte DM id", group: dmWithID("dm:" + strings.Repeat("c", 64) + ":")},
		{name: "inside: consent by inbox id", consent: consent(cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID, a64)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var el *ds.BackupElement
			var err error
			if c.group != nil {
				el = groupEl(c.group)
				_, err = svc.conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: c.group})
			} else {
				el = consentEl(c.consent)
				_, err = svc.conv.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{c.consent}})
			}
			ref := referenceImports(t, el)
			if c.field == "" {
				if ref.failed || !ref.kept() {
					t.Errorf("the reference did not import the shape and go on: failed=%v\n%s", ref.failed, tail(ref.stderr))
				}
				if err != nil {
					t.Errorf("we refuse a shape the reference imports: %v", err)
				}
				return
			}
			if !ref.failed && ref.kept() {
				t.Errorf("the reference imported the shape and went on: our rule refuses more than it does")
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.field) {
				t.Errorf("our write path: %v; want INVALID_ARGUMENT naming %s", err, c.field)
			}
		})
	}

	// Finding 5: a lone half of the disappearing pair imports in the
	// reference but loses the setting; the pair keeps it. We refuse the
	// lone half.
	loneRef := referenceImports(t, groupEl(lone), groupEl(pair))
	if loneRef.failed {
		t.Fatalf("the reference's import of the disappearing groups failed:\n%s", tail(loneRef.stderr))
	}
	settings := map[string]*refDisappearing{}
	for _, cv := range loneRef.view.Conversations {
		settings[cv.ID] = cv.Disappearing
	}
	if s, ok := settings[hex.EncodeToString(lone.Id)]; !ok || s != nil {
		t.Errorf("the reference kept a setting from a lone half (%v, %v): the rule is no longer needed", ok, s)
	}
	if s := settings[hex.EncodeToString(pair.Id)]; s == nil || s.InNs != "86400000000000" {
		t.Errorf("the reference lost a paired setting: %v", s)
	}
	_, err := svc.conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: lone})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "message_disappear") {
		t.Errorf("PutGroup of a lone half: %v; want INVALID_ARGUMENT", err)
	}
	if _, err := svc.conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: pair}); err != nil {
		t.Errorf("PutGroup of the pair: %v", err)
	}
}

func tail(s string) string {
	if len(s) > 400 {
		return s[len(s)-400:]
	}
	return s
}
