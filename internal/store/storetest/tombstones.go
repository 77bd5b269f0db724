package storetest

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

func changeSeqNow(t *testing.T, s store.Store, owner string) int64 {
	t.Helper()
	var seq int64
	err := s.Snapshot(ctx(t), owner, func(snap store.Snapshot) (err error) {
		seq, err = snap.ChangeSeq(ctx(t))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// testTombstones: every removal from the exportable state is recorded
// with its change (a deleted message with its group, send time and id; a
// group that stops being exportable with its own key), read back per
// group in export order, one per key with its newest change, bounded by
// the change range; a group that becomes exportable again brings its
// messages above the change it happened at; pruning keeps what a chain
// above the oldest complete backup needs.
func testTombstones(t *testing.T, s store.Store) {
	owner := Owner("tombstones")
	g := MinimalGroup("tomb-group")
	mustPut(t, s, owner, g)
	mustAppend(t, s, owner, Message("m-late", g.Id, 20), Message("m-early", g.Id, 10), Message("m-kept", g.Id, 15))
	before := changeSeqNow(t, s, owner)
	if has, err := s.HasTombstones(ctx(t), owner, -1, before); err != nil || has {
		t.Fatalf("tombstones before any removal: %v %v", has, err)
	}
	allow := func(*mb.GroupMessageSave, *gb.GroupSave) error { return nil }
	for _, id := range []string{"m-late", "m-early"} {
		if err := s.DeleteMessage(ctx(t), owner, g.Id, []byte(id), allow); err != nil {
			t.Fatal(err)
		}
	}
	afterDeletes := changeSeqNow(t, s, owner)
	if afterDeletes != before+2 {
		t.Fatalf("two deletes moved the change sequence from %d to %d: each delete is a change", before, afterDeletes)
	}
	// The same id stored again and deleted again: two tombstones of one
	// key, read as the newer.
	mustAppend(t, s, owner, Message("m-early", g.Id, 10))
	if err := s.DeleteMessage(ctx(t), owner, g.Id, []byte("m-early"), allow); err != nil {
		t.Fatal(err)
	}
	last := changeSeqNow(t, s, owner)
	got, err := s.GroupTombstones(ctx(t), owner, g.Id, before, last, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Tombstone{
		{Key: store.TombstoneKey{SentAtNs: 10, ID: []byte("m-early")}, ChangeSeq: last},
		{Key: store.TombstoneKey{SentAtNs: 20, ID: []byte("m-late")}, ChangeSeq: before + 1},
	}
	equal(t, "tombstones in send order, newest change per key", got, want)
	// Paged after a key, and bounded by the change range.
	if got, _ = s.GroupTombstones(ctx(t), owner, g.Id, before, last, &want[0].Key, 10); len(got) != 1 || string(got[0].Key.ID) != "m-late" {
		t.Errorf("page after m-early: %v", got)
	}
	if got, _ = s.GroupTombstones(ctx(t), owner, g.Id, before, before+1, nil, 10); len(got) != 1 || string(got[0].Key.ID) != "m-late" {
		t.Errorf("tombstones up to the first delete: %v", got)
	}
	if got, _ = s.GroupTombstones(ctx(t), Owner("other"), g.Id, -1, last, nil, 10); len(got) != 0 {
		t.Errorf("another owner reads %d tombstones", len(got))
	}

	// A group turned one-shot stops being exportable: its own tombstone,
	// first of its group's. Turned back, its messages are changed again.
	oneShot := MinimalGroup("tomb-group")
	oneShot.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_ONESHOT
	mustPut(t, s, owner, oneShot)
	buried := changeSeqNow(t, s, owner)
	got, _ = s.GroupTombstones(ctx(t), owner, g.Id, last, buried, nil, 10)
	if len(got) != 1 || !got[0].Key.IsGroup() || got[0].ChangeSeq != buried {
		t.Fatalf("the group's own tombstone: %v", got)
	}
	mustPut(t, s, owner, g)
	back := changeSeqNow(t, s, owner)
	changes := readChanges(t, s, owner, &buried)
	equal(t, "messages of a group exportable again", changes.messages[string(g.Id)], []string{"m-kept"})
	if got, _ := s.GroupTombstones(ctx(t), owner, g.Id, buried, back, nil, 10); len(got) != 0 {
		t.Errorf("a group made exportable leaves a tombstone: %v", got)
	}

	// Activation makes a Restored group exportable: its messages too.
	restoredGroup := MinimalGroup("tomb-restored")
	if _, err := s.MergeGroups(ctx(t), owner, []*gb.GroupSave{restoredGroup}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{Message("r-1", restoredGroup.Id, 5)}, store.AppendOptions{AllowRestored: true}); err != nil {
		t.Fatal(err)
	}
	preActivate := changeSeqNow(t, s, owner)
	if _, _, err := s.ActivateGroup(ctx(t), owner, restoredGroup.Id); err != nil {
		t.Fatal(err)
	}
	changes = readChanges(t, s, owner, &preActivate)
	equal(t, "messages of an activated group", changes.messages[string(restoredGroup.Id)], []string{"r-1"})

	// Pruning: nothing without a complete backup; then up to the oldest.
	if n, err := s.PruneTombstones(ctx(t), owner); err != nil || n != 0 {
		t.Fatalf("prune with no backup: %d %v", n, err)
	}
	b := writingBackup(owner, "00000000000000090000000000000000", "")
	if err := s.CreateBackup(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	completeAsJob(t, s, b, store.BackupSummary{SHA256: make([]byte, 32), At: time.Now(), ChangeSeq: before + 1})
	if n, err := s.PruneTombstones(ctx(t), owner); err != nil || n != 1 {
		t.Fatalf("prune below the oldest backup's change %d: deleted %d (%v), want 1", before+1, n, err)
	}
	if has, _ := s.HasTombstones(ctx(t), owner, -1, before+1); has {
		t.Error("a tombstone at or below the oldest backup's change survived pruning")
	}
	if has, _ := s.HasTombstones(ctx(t), owner, before+1, back); !has {
		t.Error("pruning removed tombstones above the oldest backup's change")
	}
}

// testReplacing: the writes of a restore in replace mode set records as
// given (a Restored group's state and an older consent record included),
// delete a group with its messages leaving its tombstone, delete consent,
// and raise the owner's base floor; another owner sees none of it.
func testReplacing(t *testing.T, s store.Store) {
	owner, other := Owner("replace"), Owner("replace-other")
	imported := MinimalGroup("replace-imported")
	if _, err := s.MergeGroups(ctx(t), owner, []*gb.GroupSave{imported}); err != nil {
		t.Fatal(err)
	}
	// Every field as given, the Allowed state over a Restored group too.
	want := FullGroup("replace-imported")
	if err := s.ReplaceGroup(ctx(t), owner, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetGroup(ctx(t), owner, want.Id)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "replaced group", got, want)

	mustAppend(t, s, owner, Message("doomed-1", want.Id, 1), Message("doomed-2", want.Id, 2))
	before := changeSeqNow(t, s, owner)
	if err := s.DeleteGroup(ctx(t), owner, want.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetGroup(ctx(t), owner, want.Id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted group reads %v, want ErrNotFound", err)
	}
	if exist, _ := s.MessagesExist(ctx(t), owner, [][]byte{[]byte("doomed-1"), []byte("doomed-2")}); exist[0] || exist[1] {
		t.Errorf("a deleted group's messages are still stored: %v", exist)
	}
	if tombs, _ := s.GroupTombstones(ctx(t), owner, want.Id, before, changeSeqNow(t, s, owner), nil, 10); len(tombs) != 1 || !tombs[0].Key.IsGroup() {
		t.Errorf("a deleted group's tombstones: %v, want its own", tombs)
	}
	if err := s.DeleteGroup(ctx(t), owner, want.Id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting it again: %v, want ErrNotFound", err)
	}

	// A message deleted by id alone, from whatever group holds it.
	g := MinimalGroup("replace-by-id")
	mustPut(t, s, owner, g)
	mustAppend(t, s, owner, Message("by-id", g.Id, 7))
	before = changeSeqNow(t, s, owner)
	if found, err := s.DeleteMessageByID(ctx(t), owner, []byte("by-id")); err != nil || !found {
		t.Fatalf("DeleteMessageByID: %v %v", found, err)
	}
	if tombs, _ := s.GroupTombstones(ctx(t), owner, g.Id, before, changeSeqNow(t, s, owner), nil, 10); len(tombs) != 1 || tombs[0].Key.SentAtNs != 7 {
		t.Errorf("tombstones of a message deleted by id: %v", tombs)
	}
	if found, err := s.DeleteMessageByID(ctx(t), owner, []byte("by-id")); err != nil || found {
		t.Errorf("DeleteMessageByID of a missing id: %v %v", found, err)
	}

	newer := Consent("replace-someone", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 9)
	older := Consent("replace-someone", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 3)
	if _, err := s.MergeConsent(ctx(t), owner, []*cs.ConsentSave{newer}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MergeConsent(ctx(t), other, []*cs.ConsentSave{newer}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceConsent(ctx(t), owner, []*cs.ConsentSave{older}); err != nil {
		t.Fatal(err)
	}
	key := store.ConsentKey{EntityType: older.EntityType, Entity: older.Entity}
	if got, err := s.GetConsent(ctx(t), owner, key); err != nil || !proto.Equal(got, older) {
		t.Errorf("replaced consent: %v %v, want the older record as given", got, err)
	}
	if err := s.DeleteConsent(ctx(t), owner, []store.ConsentKey{key, {EntityType: key.EntityType, Entity: "nobody"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetConsent(ctx(t), owner, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted consent reads %v, want ErrNotFound", err)
	}
	if got, err := s.GetConsent(ctx(t), other, key); err != nil || !proto.Equal(got, newer) {
		t.Errorf("another owner's consent: %v %v", got, err)
	}

	if floor, err := s.BaseFloor(ctx(t), owner); err != nil || floor != 0 {
		t.Fatalf("base floor before any replace: %d %v", floor, err)
	}
	floor, err := s.RaiseBaseFloor(ctx(t), owner)
	if err != nil || floor != changeSeqNow(t, s, owner) {
		t.Fatalf("raised floor %d (%v), want the owner's change sequence %d", floor, err, changeSeqNow(t, s, owner))
	}
	if got, _ := s.BaseFloor(ctx(t), owner); got != floor {
		t.Errorf("base floor reads %d, want %d", got, floor)
	}
	if got, _ := s.BaseFloor(ctx(t), other); got != 0 {
		t.Errorf("another owner's base floor: %d", got)
	}
}
