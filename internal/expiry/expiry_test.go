package expiry

import (
	"fmt"
	"testing"
	"time"

	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// expiring stores n messages of owner that expired an hour ago.
func expiring(t *testing.T, st store.Store, owner string, n int) {
	t.Helper()
	g := storetest.FullGroup("g")
	if _, err := st.PutGroup(t.Context(), owner, g); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour).UnixNano()
	var msgs []*mb.GroupMessageSave
	for i := range n {
		m := storetest.Message(fmt.Sprintf("%s-%d", owner, i), g.GetId(), int64(1000+i))
		m.ExpiresAtNs, m.ExpiryKnown = &past, new(bool)
		*m.ExpiryKnown = true
		msgs = append(msgs, m)
	}
	if _, err := st.AppendMessages(t.Context(), owner, msgs, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
}

func stored(t *testing.T, st store.Store, owner string) int {
	t.Helper()
	page, err := st.ListMessages(t.Context(), owner, store.MessageQuery{GroupID: storetest.GroupID("g"), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Messages)
}

// TestPurgeIsFairAndBounded: a run deletes at most MaxPerRun messages and
// the next run goes on after the last owner reached, so owners with a few
// expired messages are purged by the second run although another owner's
// backlog alone would fill many; the lag reported falls to zero once
// nothing expired is left.
func TestPurgeIsFairAndBounded(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			expiring(t, st, "big", 50)
			for _, small := range []string{"s1", "s2", "s3"} {
				expiring(t, st, small, 2)
			}
			var purged []int64
			var lag time.Duration
			w := New(Config{Store: st, Owners: 1, PerOwner: 10, MaxPerRun: 12,
				Purged: func(n int64) { purged = append(purged, n) }, Lag: func(d time.Duration) { lag = d }})
			now := time.Now()
			for run := range 2 {
				if _, err := w.RunOnce(t.Context(), now); err != nil {
					t.Fatal(err)
				}
				if lag < 59*time.Minute {
					t.Errorf("run %d: lag %s, want about an hour (expired messages are left)", run, lag)
				}
			}
			if fmt.Sprint(purged) != "[12 12]" {
				t.Errorf("runs deleted %v, want [12 12]: MaxPerRun bounds a run", purged)
			}
			for _, small := range []string{"s1", "s2", "s3"} {
				if n := stored(t, st, small); n != 0 {
					t.Errorf("owner %s keeps %d expired messages after two runs: starved by big's backlog", small, n)
				}
			}
			for range 10 {
				if _, err := w.RunOnce(t.Context(), now); err != nil {
					t.Fatal(err)
				}
			}
			if n := stored(t, st, "big"); n != 0 || lag != 0 {
				t.Errorf("after the backlog: big keeps %d, lag %s", n, lag)
			}
		})
	}
}
