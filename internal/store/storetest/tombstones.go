package storetest

import (
	"testing"
	"time"

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
