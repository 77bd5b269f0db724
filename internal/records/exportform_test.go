//lint:file-ignore SA1019 content_type_save is retired but still stored: the rule under test is about its values.
package records

import (
	"testing"

	"google.golang.org/protobuf/proto"

	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// TestExportFormEveryContentShape_ARCH008: the retired content_type_save
// goes out only where it names the message's own type, for typed
// envelopes (the envelope's type) and for untyped content (raw bytes, an
// envelope without a type: the stored content_type), so the reference,
// which reads the enum first, files each message under its own type
// (issue 45, finding 3).
func TestExportFormEveryContentShape_ARCH008(t *testing.T) {
	envelope := func(authority, typeID string) []byte {
		ec := &mc.EncodedContent{Content: []byte("hi")}
		if typeID != "" {
			ec.Type = &mc.ContentTypeId{AuthorityId: authority, TypeId: typeID, VersionMajor: 1}
		}
		b, err := proto.Marshal(ec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const (
		text       = mb.ContentTypeSave_CONTENT_TYPE_SAVE_TEXT
		attachment = mb.ContentTypeSave_CONTENT_TYPE_SAVE_ATTACHMENT
		unset      = mb.ContentTypeSave_CONTENT_TYPE_SAVE_UNSPECIFIED
	)
	tests := []struct {
		name             string
		content          []byte
		authority, ctype string
		enum, want       mb.ContentTypeSave
	}{
		{"typed text, enum TEXT", envelope("xmtp.org", "text"), "xmtp.org", "text", text, text},
		{"typed text, enum ATTACHMENT", envelope("xmtp.org", "text"), "xmtp.org", "text", attachment, unset},
		{"typed custom, enum TEXT", envelope("example.com", "text"), "example.com", "text", text, unset},
		// The envelope's type decides, not stored fields that disagree.
		{"typed text stored as attachment, enum TEXT", envelope("xmtp.org", "text"), "xmtp.org", "attachment", text, text},
		{"typed attachment stored as text, enum TEXT", envelope("xmtp.org", "attachment"), "xmtp.org", "text", text, unset},
		{"raw bytes typed text, enum ATTACHMENT", []byte("\xff raw"), "", "text", attachment, unset},
		{"raw bytes typed text, enum TEXT", []byte("\xff raw"), "", "text", text, text},
		{"raw bytes custom authority, enum TEXT", []byte("\xff raw"), "example.com", "text", text, unset},
		{"envelope without type, enum ATTACHMENT", envelope("", ""), "xmtp.org", "text", attachment, unset},
		{"envelope without type, enum TEXT", envelope("", ""), "xmtp.org", "text", text, text},
		{"no enum", []byte("x"), "", "text", unset, unset},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &mb.GroupMessageSave{DecryptedMessageBytes: tc.content, AuthorityId: tc.authority, ContentType: tc.ctype, ContentTypeSave: tc.enum}
			ExportForm(m)
			if m.GetContentTypeSave() != tc.want {
				t.Errorf("content_type_save %v, want %v", m.GetContentTypeSave(), tc.want)
			}
		})
	}
}

// TestGroupExportable_ARCH010_ARCH026: every group and DM is exportable
// except sync and one-shot conversations (ARCH-010) and Restored ones
// (ARCH-026), whatever else they hold.
func TestGroupExportable_ARCH010_ARCH026(t *testing.T) {
	types := map[gb.ConversationTypeSave]bool{
		gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_UNSPECIFIED: true,
		gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP:       true,
		gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM:          true,
		gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_SYNC:        false,
		gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_ONESHOT:     false,
	}
	states := map[gb.GroupMembershipStateSave]bool{
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_UNSPECIFIED: true,
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED:     true,
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_REJECTED:    true,
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_PENDING:     true,
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED:    false,
	}
	for typ, typeOK := range types {
		for state, stateOK := range states {
			g := &gb.GroupSave{ConversationType: typ, MembershipState: state}
			if got := GroupExportable(g); got != (typeOK && stateOK) {
				t.Errorf("%v, %v: exportable %v, want %v", typ, state, got, typeOK && stateOK)
			}
		}
	}
}
