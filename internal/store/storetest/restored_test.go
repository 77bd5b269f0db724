package storetest

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
)

// TestRestoredFormListsEveryField: from a group with every field set, at
// every depth, RestoredForm keeps every field set (ARCH-020), so a field
// GroupSave gains is caught here until RestoredForm copies it.
func TestRestoredFormListsEveryField(t *testing.T) {
	full := fullGroup("g")
	var everySet func(path string, m protoreflect.Message)
	everySet = func(path string, m protoreflect.Message) {
		fields := m.Descriptor().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if !m.Has(f) {
				t.Errorf("%s%s is not set", path, f.Name())
				continue
			}
			if f.Kind() == protoreflect.MessageKind && !f.IsMap() && !f.IsList() {
				everySet(path+string(f.Name())+".", m.Get(f).Message())
			}
		}
	}
	everySet("fixture ", full.ProtoReflect())
	got := RestoredForm(full)
	everySet("RestoredForm ", got.ProtoReflect())
	want := fullGroup("g")
	want.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED // ARCH-015
	if !proto.Equal(got, want) {
		t.Errorf("RestoredForm\n got %v\nwant %v", got, want)
	}
}
