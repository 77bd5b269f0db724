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
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
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
	archive := sealForReference(t, elements...)
	in, _ := json.Marshal(map[string]any{"key": hex.EncodeToString(interopKey), "archive": hex.EncodeToString(archive)})
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

// messageOf is a message of the sentinel group, changed by mutate.
func messageOf(name string, mutate func(*mb.GroupMessageSave)) *mb.GroupMessageSave {
	env, _ := codec.NewRegistry().Encode(codec.TypeText, name)
	text, _ := proto.Marshal(env)
	m := &mb.GroupMessageSave{Id: id32("rules message " + name), GroupId: sentinelGroup.Id, DecryptedMessageBytes: text, SentAtNs: 1_700_000_000_000_000_002,
		Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION, SenderInboxId: inboxID("sentinel"), SenderInstallationId: id32("i"),
		DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED, ExpiryKnown: proto.Bool(true)}
	mutate(m)
	return m
}

// TestReferenceRules_WeTakeWhatTheReferenceTakes: the over-refusals the
// issue found, each against the reference. The shapes we used to refuse
// that the reference's import takes (a device may hold them) are taken
// here too; the ones we still refuse must each match an entry of
// overRefusals, the one allow-list with its reasons (generator_test.go).
// A shape that the reference stops taking, or that we start taking,
// fails the test.
func TestReferenceRules_WeTakeWhatTheReferenceTakes(t *testing.T) {
	svc := startServices(t)
	owner := inboxID("takes owner")
	if _, err := svc.conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: sentinelGroup}); err != nil {
		t.Fatal(err)
	}
	unspecified := proto.Clone(sentinelGroup).(*gb.GroupSave)
	unspecified.Id = id32("unspecified membership")[:16]
	unspecified.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_UNSPECIFIED
	nulAttr := proto.Clone(sentinelGroup).(*gb.GroupSave)
	nulAttr.Id = id32("nul attribute")[:16]
	nulAttr.MutableMetadata = &gb.MutableMetadataSave{Attributes: map[string]string{"group_name": "a\x00b"}}
	state42 := proto.Clone(sentinelGroup).(*gb.GroupSave)
	state42.Id = id32("membership 42")[:16]
	state42.MembershipState = 42
	big := proto.Clone(sentinelGroup).(*gb.GroupSave)
	big.Id = id32("big group")[:16]
	big.MutableMetadata = &gb.MutableMetadataSave{Attributes: map[string]string{"description": strings.Repeat("d", 300<<10)}}
	dm67 := dmWithID("dm:" + strings.Repeat("c", 64))
	consent := func(entity string, at int64) *cs.ConsentSave {
		return &cs.ConsentSave{EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, Entity: entity, ConsentedAtNs: at}
	}
	cases := []struct {
		name    string
		group   *gb.GroupSave
		message *mb.GroupMessageSave
		consent *cs.ConsentSave
		// field: the field our refusal names, for a shape we still refuse
		// though the reference takes it (one of overRefusals); "" for a
		// shape both take.
		field string
	}{
		{name: "a group of unspecified membership state", group: unspecified},
		//lint:ignore SA1019 the retired field's unknown value is the shape under test
		{name: "content_type_save 42", message: messageOf("cts", func(m *mb.GroupMessageSave) { m.ContentTypeSave = 42 })},
		{name: "an empty consent entity", consent: consent("", 1)},
		{name: "a 1,500-byte consent entity", consent: consent(strings.Repeat("e", 1500), 1)},

		{name: "a group of membership state 42", group: state42},
		{name: "a NUL in a group attribute", group: nulAttr, field: "mutable_metadata.attributes"},
		{name: "a group over 256 KiB", group: big, field: "group"},
		{name: "a 67-byte DM id", group: dm67, field: "dm_id"},
		{name: "an empty message id", message: messageOf("no id", func(m *mb.GroupMessageSave) { m.Id = nil }), field: "id"},
		{name: "a 257-byte message id", message: messageOf("long id", func(m *mb.GroupMessageSave) { m.Id = bytes.Repeat([]byte{7}, 257) }), field: "id"},
		{name: "a NUL in sender_inbox_id", message: messageOf("nul sender", func(m *mb.GroupMessageSave) { m.SenderInboxId = "a\x00b" }), field: "sender_inbox_id"},
		{name: "expires_at_ns without expiry_known", message: messageOf("deadline", func(m *mb.GroupMessageSave) { m.ExpiryKnown = nil; m.ExpiresAtNs = proto.Int64(1) }), field: "expires_at_ns"},
		{name: "a 2,049-byte consent entity", consent: consent(strings.Repeat("e", 2049), 1), field: "entity"},
		{name: "consent dated a day ahead", consent: consent("future", time.Now().Add(24*time.Hour).UnixNano()), field: "consented_at_ns"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var el *ds.BackupElement
			var err error
			switch {
			case c.group != nil:
				el = groupEl(c.group)
				_, err = svc.conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: c.group})
			case c.message != nil:
				el = &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: c.message}}
				m := proto.Clone(c.message).(*mb.GroupMessageSave)
				m.SenderInboxId = owner
				if c.field == "sender_inbox_id" {
					m.SenderInboxId = c.message.GetSenderInboxId()
				}
				_, err = svc.conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: owner, Messages: []*mb.GroupMessageSave{m}})
			default:
				el = consentEl(c.consent)
				_, err = svc.conv.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{c.consent}})
			}
			ref := referenceImports(t, el)
			if ref.failed || !ref.kept() {
				t.Fatalf("the reference no longer takes this shape (failed=%v): it leaves the list\n%s", ref.failed, tail(ref.stderr))
			}
			if c.field == "" {
				if err != nil {
					t.Errorf("we refuse a shape the reference takes: %v", err)
				}
				return
			}
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, c.field) {
				t.Errorf("our write path gave %v; want INVALID_ARGUMENT naming %s", err, c.field)
			}
			kind := map[bool]string{true: "group"}[c.group != nil] + map[bool]string{true: "message"}[c.message != nil] + map[bool]string{true: "consent"}[c.consent != nil]
			if _, ok := overRefusal(kind, msg); !ok {
				t.Errorf("we refuse a shape the reference takes (%s) and no entry of overRefusals names it", msg)
			}
		})
	}
}

func tail(s string) string {
	if len(s) > 400 {
		return s[len(s)-400:]
	}
	return s
}
