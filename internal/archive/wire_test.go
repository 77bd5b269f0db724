package archive

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// TestARCH004_ElementsNeverChangeMeaning pins every field of section 2's
// messages, and every enum value, to the number, type and cardinality the
// spec gives them: a renumbered or retyped field fails here before it can
// change what an archive means.
func TestARCH004_ElementsNeverChangeMeaning(t *testing.T) {
	messages := map[protoreflect.MessageDescriptor]string{
		(&ds.BackupElement{}).ProtoReflect().Descriptor():      "1 metadata message; 2 group message; 3 group_message message; 4 consent message; 5 event message",
		(&ds.BackupMetadataSave{}).ProtoReflect().Descriptor(): "2 elements repeated enum; 3 exported_at_ns int64; 4 start_ns optional int64; 5 end_ns optional int64",
		(&ds.ArchiveOptions{}).ProtoReflect().Descriptor():     "1 elements repeated enum; 2 start_ns optional int64; 3 end_ns optional int64; 4 exclude_disappearing_messages bool",
		(&gb.GroupSave{}).ProtoReflect().Descriptor(): "1 id bytes; 2 created_at_ns int64; 3 membership_state enum; 4 installations_last_checked int64; " +
			"5 added_by_inbox_id string; 6 welcome_id optional int64; 7 rotated_at_ns int64; 8 conversation_type enum; 9 dm_id optional string; " +
			"10 last_message_ns optional int64; 11 message_disappear_from_ns optional int64; 12 message_disappear_in_ns optional int64; " +
			"13 metadata message; 14 mutable_metadata message; 15 paused_for_version optional string",
		(&gb.MutableMetadataSave{}).ProtoReflect().Descriptor():   "1 attributes map; 2 admin_list repeated string; 3 super_admin_list repeated string",
		(&gb.ImmutableMetadataSave{}).ProtoReflect().Descriptor(): "1 creator_inbox_id string",
		(&mb.GroupMessageSave{}).ProtoReflect().Descriptor(): "1 id bytes; 2 group_id bytes; 3 decrypted_message_bytes bytes; 4 sent_at_ns int64; 5 kind enum; " +
			"6 sender_installation_id bytes; 7 sender_inbox_id string; 8 delivery_status enum; 9 content_type_save enum; 10 version_major int32; " +
			"11 version_minor int32; 12 authority_id string; 13 reference_id optional bytes; 14 sequence_id optional int64; 15 originator_id optional int64; " +
			"16 content_type string; 17 expires_at_ns optional int64; 18 expiry_known optional bool",
		(&cs.ConsentSave{}).ProtoReflect().Descriptor(): "1 entity_type enum; 2 state enum; 3 entity string; 4 consented_at_ns int64",
	}
	for md, want := range messages {
		var got []string
		fields := md.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			s := fmt.Sprintf("%d %s ", f.Number(), f.Name())
			switch {
			case f.IsMap():
				s += "map"
			case f.IsList():
				s += "repeated " + f.Kind().String()
			case f.HasOptionalKeyword():
				s += "optional " + f.Kind().String()
			default:
				s += f.Kind().String()
			}
			got = append(got, s)
		}
		if g := strings.Join(got, "; "); g != want {
			t.Errorf("%s:\n got %s\nwant %s", md.FullName(), g, want)
		}
	}
	enums := map[protoreflect.EnumDescriptor]string{
		ds.BackupElementSelection(0).Descriptor():   "0 1 2 3",
		gb.GroupMembershipStateSave(0).Descriptor(): "0 1 2 3 4 5",
		gb.ConversationTypeSave(0).Descriptor():     "0 1 2 3 4",
		mb.GroupMessageKindSave(0).Descriptor():     "0 1 2",
		mb.DeliveryStatusSave(0).Descriptor():       "0 1 2 3",
		mb.ContentTypeSave(0).Descriptor():          "0 1 2 3 4 5 6 7 8 9 10", //lint:ignore SA1019 retired, still pinned
		cs.ConsentTypeSave(0).Descriptor():          "0 1 2 3",
		cs.ConsentStateSave(0).Descriptor():         "0 1 2 3",
	}
	for ed, want := range enums {
		var got []string
		for i := range ed.Values().Len() {
			got = append(got, fmt.Sprint(ed.Values().Get(i).Number()))
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("%s values %s; want %s", ed.FullName(), g, want)
		}
	}
	// The values' names too: a renamed value would change JSON and text.
	if gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED != 4 || gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_SYNC != 3 {
		t.Error("Restored must be 4 and Sync 3")
	}
}
