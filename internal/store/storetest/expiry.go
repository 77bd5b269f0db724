package storetest

import (
	"fmt"
	"testing"
	"time"

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
