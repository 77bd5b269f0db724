//lint:file-ignore SA1019 content_type_save is retired but still stored, and made to agree with the envelope on export (ARCH-004, ARCH-008).
package interop

import (
	"encoding/hex"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// Issue 34: every record accepted is a record exported, with its type
// intact in the reference.

// TestNoPoisonRecord_ARCH008 (finding 1): a message whose envelope's type
// strings hold a NUL is refused where it comes in, AppendMessages and
// Import alike, naming the identifier field they would have been copied
// to (ARCH-008), before anything is stored; the owner's exports go on.
// The reference's import takes such a record (the refusal is on the
// over-refusal list: Postgres text holds no NUL). Before, the write path
// checked the fields the caller sent, the envelope's strings were copied
// in after, and every export of the owner failed from then on.
func TestNoPoisonRecord_ARCH008(t *testing.T) {
	svc := startServices(t)
	owner := inboxID("poison owner")
	if _, err := svc.conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: sentinelGroup}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, field string
		typ         *mc.ContentTypeId
	}{
		{"a NUL in the type id", "content_type", &mc.ContentTypeId{AuthorityId: "xmtp.org", TypeId: "te\x00xt", VersionMajor: 1}},
		{"a NUL in the authority", "authority_id", &mc.ContentTypeId{AuthorityId: "xmtp\x00.org", TypeId: "text", VersionMajor: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env, _ := proto.Marshal(&mc.EncodedContent{Type: c.typ, Content: []byte("hi")})
			m := messageOf(c.name, func(m *mb.GroupMessageSave) { m.DecryptedMessageBytes = env })
			ref := referenceImports(t, &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}})
			if ref.failed || !ref.kept() {
				t.Fatalf("the reference no longer takes the record (failed=%v)\n%s", ref.failed, tail(ref.stderr))
			}
			mine := proto.Clone(m).(*mb.GroupMessageSave)
			mine.SenderInboxId = owner
			_, err := svc.conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: owner, Messages: []*mb.GroupMessageSave{mine}})
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, c.field) || !strings.Contains(msg, "NUL") {
				t.Fatalf("AppendMessages: %v; want INVALID_ARGUMENT naming %s", err, c.field)
			}
			if _, ok := overRefusal("message", msg); !ok {
				t.Errorf("the refusal %q is on no entry of overRefusals", msg)
			}
			// Import refuses it too, naming the record and the field.
			archive := sealForReference(t, &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: mine}})
			_, err = importOver(t, svc.arch, owner, archive)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.field) {
				t.Errorf("Import: %v; want INVALID_ARGUMENT naming %s", err, c.field)
			}
			// Nothing poisoned the owner: its export goes on.
			if _, summary := exportOver(t, svc.arch, owner); summary.GetGroups() == 0 {
				t.Errorf("the owner's export after the refusal: %v", summary)
			}
		})
	}
}

// TestReferenceListsEachMessageUnderItsType_ARCH008 (finding 2): a
// message whose retired content_type_save disagrees with its envelope
// (stored as given, ARCH-004) exports with an enum that agrees or none,
// so the reference, whose import reads the enum before the type string,
// files each under its envelope's type. Before, a text message tagged
// ATTACHMENT was filed there as an attachment (its contentTypes filter
// found it among attachments, not texts).
func TestReferenceListsEachMessageUnderItsType_ARCH008(t *testing.T) {
	svc := startServices(t)
	owner := inboxID("types owner")
	if _, err := svc.conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: sentinelGroup}); err != nil {
		t.Fatal(err)
	}
	reg := codec.NewRegistry()
	encode := func(typ codec.TypeID, v any) []byte {
		ec, err := reg.Encode(typ, v)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.Marshal(ec)
		return b
	}
	text, markdown := encode(codec.TypeText, "a text"), encode(codec.TypeMarkdown, "**bold**")
	cases := []struct {
		name    string
		content []byte
		enum    mb.ContentTypeSave
		// wantType: the reference's ContentType the message must be
		// filed under (what its contentTypes filter finds it by).
		wantType string
	}{
		{"text tagged ATTACHMENT", text, mb.ContentTypeSave_CONTENT_TYPE_SAVE_ATTACHMENT, "Text"},
		{"text tagged GROUP_UPDATED", text, mb.ContentTypeSave_CONTENT_TYPE_SAVE_GROUP_UPDATED, "Text"},
		{"text tagged REPLY", text, mb.ContentTypeSave_CONTENT_TYPE_SAVE_REPLY, "Text"},
		{"markdown tagged TEXT", markdown, mb.ContentTypeSave_CONTENT_TYPE_SAVE_TEXT, "Markdown"},
		{"text tagged TEXT (agrees)", text, mb.ContentTypeSave_CONTENT_TYPE_SAVE_TEXT, "Text"},
	}
	var msgs []*mb.GroupMessageSave
	for _, c := range cases {
		m := messageOf(c.name, func(m *mb.GroupMessageSave) {
			m.DecryptedMessageBytes, m.SenderInboxId = c.content, owner
			m.ContentTypeSave = c.enum
		})
		msgs = append(msgs, m)
	}
	if _, err := svc.conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: owner, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	data, _ := exportOver(t, svc.arch, owner)
	var view refArchiveView
	runScript(t, "archive.mjs", "import", map[string]any{"key": hex.EncodeToString(interopKey), "archive": hex.EncodeToString(data)}, &view)
	filed := map[string][]string{}
	for _, m := range view.Messages {
		filed[m.ID] = m.ListedAs
	}
	for i, c := range cases {
		if got := filed[hex.EncodeToString(msgs[i].GetId())]; len(got) != 1 || got[0] != c.wantType {
			t.Errorf("%s: the reference files it under %v, want [%s]", c.name, got, c.wantType)
		}
	}
}
