package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// changed is what a snapshot filtered by ChangedAfter(seq) shows.
type changed struct {
	seq      int64
	groups   []string
	messages map[string][]string // group -> message ids, in send order
	consent  []string
}

func readChanges(t *testing.T, s store.Store, owner string, after *int64) changed {
	t.Helper()
	out := changed{messages: map[string][]string{}}
	err := s.Snapshot(ctx(t), owner, func(snap store.Snapshot) error {
		var err error
		if out.seq, err = snap.ChangeSeq(ctx(t)); err != nil {
			return err
		}
		if after != nil {
			snap = snap.ChangedAfter(*after)
		}
		var groups [][]byte
		if err := snap.EachGroup(ctx(t), func(g *gb.GroupSave) error {
			out.groups = append(out.groups, string(g.Id))
			groups = append(groups, g.Id)
			return nil
		}); err != nil {
			return err
		}
		for _, g := range groups {
			if err := snap.EachMessage(ctx(t), store.MessageQuery{GroupID: g}, func(m *mb.GroupMessageSave) error {
				out.messages[string(g)] = append(out.messages[string(g)], string(m.Id))
				return nil
			}); err != nil {
				return err
			}
		}
		return snap.EachConsent(ctx(t), func(c *cs.ConsentSave) error {
			out.consent = append(out.consent, c.Entity)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testChangesSince: the owner's change sequence behind incremental
// backups. A snapshot filtered by ChangedAfter(seq) holds exactly what was
// written after a snapshot that saw seq: new and imported messages (an
// imported one with an old sent_at too), groups put, activated or whose
// last message moved, the group of every changed message, and consent
// records that changed; nothing unchanged, nothing of another owner.
func testChangesSince(t *testing.T, s store.Store) {
	owner, other := Owner("changes"), Owner("changes-other")
	if got := readChanges(t, s, owner, nil); got.seq != 0 {
		t.Errorf("a new owner's change sequence is %d, want 0", got.seq)
	}
	mustPut(t, s, owner, minimalGroup("quiet"))
	mustPut(t, s, owner, minimalGroup("busy"))
	mustAppend(t, s, owner, Message("q1", []byte("quiet"), 10), Message("b1", []byte("busy"), 10))
	if _, err := s.MergeConsent(ctx(t), owner, []*cs.ConsentSave{
		Consent("kept", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 5),
		Consent("flipped", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 5),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MergeGroups(ctx(t), owner, []*gb.GroupSave{minimalGroup("imported")}); err != nil {
		t.Fatal(err)
	}
	base := readChanges(t, s, owner, nil)
	if base.seq == 0 {
		t.Fatal("writes left the change sequence at 0")
	}
	if none := readChanges(t, s, owner, &base.seq); len(none.groups)+len(none.consent) != 0 {
		t.Fatalf("nothing written since, but the increment holds %+v", none)
	}

	// Changes, each of a different kind.
	mustAppend(t, s, owner, Message("b2", []byte("busy"), 20))
	late := Message("late", []byte("busy"), 1) // sent long before b1, stored after the base
	if _, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{late}, store.AppendOptions{AllowRestored: true}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, owner, Message("q1", []byte("quiet"), 10)) // known: unchanged
	if _, err := s.MergeConsent(ctx(t), owner, []*cs.ConsentSave{
		Consent("kept", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 4), // older: loses
		Consent("flipped", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 6),
		Consent("new", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 1),
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ActivateGroup(ctx(t), owner, []byte("imported")); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, owner, minimalGroup("fresh"))
	mustPut(t, s, other, minimalGroup("elsewhere"))
	mustAppend(t, s, other, Message("x", []byte("elsewhere"), 30))

	got := readChanges(t, s, owner, &base.seq)
	equal(t, "changed groups", got.groups, []string{"busy", "fresh", "imported"})
	equal(t, "changed messages", got.messages, map[string][]string{"busy": {"late", "b2"}})
	equal(t, "changed consent", got.consent, []string{"flipped", "new"})
	if got.seq <= base.seq {
		t.Errorf("change sequence %d after writes, was %d", got.seq, base.seq)
	}
	// The next increment starts where this one's snapshot stood.
	if next := readChanges(t, s, owner, &got.seq); len(next.groups)+len(next.consent) != 0 {
		t.Errorf("nothing written since the second snapshot, but it shows %+v", next)
	}
	// A failed write raises nothing: its transaction, counter included,
	// rolled back.
	if _, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{Message("orphan", []byte("missing"), 1)}, store.AppendOptions{}); err == nil {
		t.Fatal("append to a missing group succeeded")
	}
	if again := readChanges(t, s, owner, nil); again.seq != got.seq {
		t.Errorf("a refused append moved the change sequence from %d to %d", got.seq, again.seq)
	}
}

// testChangesUnderConcurrentWriters: writers of one owner racing each get
// their own sequence number, and a snapshot taken at any moment splits
// their messages cleanly: each message is either at or below the
// snapshot's sequence and in it, or above it and out of it. A writer
// committing a lower number after the snapshot would be lost by every
// increment, which the counter's row lock rules out.
func testChangesUnderConcurrentWriters(t *testing.T, s store.Store) {
	owner := Owner("changes-race")
	mustPut(t, s, owner, minimalGroup("g"))
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	snaps := make(chan changed, 8)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := s.AppendMessages(ctx(t), owner, []*mb.GroupMessageSave{Message(fmt.Sprintf("w%d-%03d", w, i), []byte("g"), int64(i))}, store.AppendOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	go func() {
		defer close(snaps)
		for range 8 {
			snaps <- readChanges(t, s, owner, nil)
		}
	}()
	var taken []changed
	for c := range snaps {
		taken = append(taken, c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	final := readChanges(t, s, owner, nil)
	for _, snap := range taken {
		after := readChanges(t, s, owner, &snap.seq)
		in, out := snap.messages["g"], after.messages["g"]
		for _, id := range in {
			if slices.Contains(out, id) {
				t.Errorf("message %s is in the snapshot at %d and in the increment after it", id, snap.seq)
			}
		}
		if len(in)+len(out) != len(final.messages["g"]) {
			t.Errorf("snapshot at %d holds %d, the increment after it %d: %d lost or doubled of %d",
				snap.seq, len(in), len(out), len(final.messages["g"])-len(in)-len(out), len(final.messages["g"]))
		}
	}
	if len(final.messages["g"]) != writers*each {
		t.Errorf("%d messages stored, want %d", len(final.messages["g"]), writers*each)
	}
}
