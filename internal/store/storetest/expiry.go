package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// testPurgeExpired: a message whose deadline has passed is not listed
// once the query says when it is read (MessageQuery.LiveAtNs), and the
// purge deletes it: every owner in turn, a bounded batch each, however
// large another owner's backlog; unexpired and undated messages stay.
func testPurgeExpired(t *testing.T, s store.Store) {
	now := time.Now()
	past, future := now.Add(-time.Hour).UnixNano(), now.Add(time.Hour).UnixNano()
	// a: 5 expired, 2 to expire, 2 without a deadline; b: 3 expired; c: 1 to expire.
	plan := map[string][]*int64{
		"a": {&past, &past, &past, &past, &past, &future, &future, nil, nil},
		"b": {&past, &past, &past},
		"c": {&future},
	}
	for owner, deadlines := range plan {
		g := FullGroup("g")
		if _, err := s.PutGroup(ctx(t), owner, g); err != nil {
			t.Fatal(err)
		}
		var msgs []*mb.GroupMessageSave
		for i, d := range deadlines {
			m := Message(fmt.Sprintf("%s-%d", owner, i), g.GetId(), int64(1000+i))
			if d != nil {
				// Each expired message a nanosecond apart, so the oldest is known.
				v := *d + int64(i)
				m.ExpiresAtNs, m.ExpiryKnown = &v, ptr(true)
			}
			msgs = append(msgs, m)
		}
		if _, err := s.AppendMessages(ctx(t), owner, msgs, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	listed := func(owner string, liveAt int64) int {
		t.Helper()
		page, err := s.ListMessages(ctx(t), owner, store.MessageQuery{GroupID: GroupID("g"), Limit: 100, LiveAtNs: liveAt})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Messages)
	}
	equal(t, "a's messages read now, before any purge", listed("a", now.UnixNano()), 4)
	equal(t, "a's messages read without a time", listed("a", 0), 9)
	oldest, err := s.OldestExpired(ctx(t), now)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "oldest expired deadline", oldest.UnixNano(), past)

	// One owner per call, two messages each: a, then b, then the end.
	// A pass ends when the last owner is reached (""); passes go on until
	// one deletes nothing.
	var turns []string
	var total, pass int64
	after := ""
	for range 20 {
		n, last, err := s.PurgeExpired(ctx(t), now, after, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		total, pass = total+n, pass+n
		turns = append(turns, fmt.Sprintf("%s:%d", last, n))
		after = last
		if last == "" {
			if pass == 0 {
				break
			}
			pass = 0
		}
	}
	equal(t, "purge turns (owner reached: deleted)", fmt.Sprint(turns), "[a:2 b:2 :0 a:2 b:1 :0 a:1 :0 :0]")
	equal(t, "messages purged", total, int64(8))
	equal(t, "a's messages left", listed("a", 0), 4)
	equal(t, "b's messages left", listed("b", 0), 0)
	equal(t, "c's messages left", listed("c", 0), 1)
	if oldest, err := s.OldestExpired(ctx(t), now); err != nil || !oldest.IsZero() {
		t.Errorf("oldest expired after the purge: %v, %v; want none", oldest, err)
	}
}

// testLookups: the reads an import's dry run makes answer for the owner
// alone: which message ids it stores (in any batch size), and the consent
// record of a key.
func testLookups(t *testing.T, s store.Store) {
	g := FullGroup("g")
	if _, err := s.PutGroup(ctx(t), "alice", g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessages(ctx(t), "alice", Messages("m", g.GetId(), 1500, 1), store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	var ids [][]byte
	for i := range 2000 {
		ids = append(ids, []byte(fmt.Sprintf("m-%06d", i)))
	}
	exist, err := s.MessagesExist(ctx(t), "alice", ids)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, ok := range exist {
		if ok != (i < 1500) {
			t.Fatalf("id %s: exists %v", ids[i], ok)
		}
		if ok {
			n++
		}
	}
	equal(t, "ids alice stores", n, 1500)
	if other, err := s.MessagesExist(ctx(t), "bob", ids[:10]); err != nil || slices.Contains(other, true) {
		t.Errorf("bob's view of alice's ids: %v, %v", other, err)
	}
	c := &cs.ConsentSave{EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, Entity: "inbox-x", ConsentedAtNs: 42}
	if _, err := s.MergeConsent(ctx(t), "alice", []*cs.ConsentSave{c}); err != nil {
		t.Fatal(err)
	}
	key := store.ConsentKey{EntityType: c.EntityType, Entity: c.Entity}
	got, err := s.GetConsent(ctx(t), "alice", key)
	if err != nil || got.GetConsentedAtNs() != 42 || got.GetState() != c.State || got.GetEntity() != "inbox-x" {
		t.Errorf("GetConsent: %v, %v", got, err)
	}
	if _, err := s.GetConsent(ctx(t), "bob", key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bob's GetConsent of alice's key: %v, want ErrNotFound", err)
	}
}

// FillDisappearing gives owners more owners (numbered from first) a
// group of per messages that disappear from deadline on: a fleet whose
// expiry work is, before the deadline, none.
func FillDisappearing(t *testing.T, s store.Store, owners, per int, deadline time.Time, first int) {
	t.Helper()
	for o := first; o < first+owners; o++ {
		owner := fmt.Sprintf("idle-%06d", o)
		g := FullGroup("g")
		if _, err := s.PutGroup(ctx(t), owner, g); err != nil {
			t.Fatal(err)
		}
		msgs := make([]*mb.GroupMessageSave, 0, per)
		for i := range per {
			m := Message(fmt.Sprintf("m-%d", i), g.GetId(), int64(1000+i))
			v := deadline.UnixNano() + int64(o*per+i)
			m.ExpiresAtNs, m.ExpiryKnown = &v, ptr(true)
			msgs = append(msgs, m)
		}
		if _, err := s.AppendMessages(ctx(t), owner, msgs, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
