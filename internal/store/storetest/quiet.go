package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/internal/sqlstore"
)

// FillQuiet gives owners first..first+owners-1 ("quiet-000000", ...) what
// every owner of a fleet has and none of it due: an owner key under the
// KEK kek, and an export job that ended now (kept for days). The periodic
// work tests fill a fleet of them and count what each periodic query
// reads with nothing due (issue 52).
func FillQuiet(t *testing.T, s store.Store, owners, first int, kek string) {
	t.Helper()
	now := time.Unix(0, time.Now().UnixNano())
	for o := first; o < first+owners; o++ {
		owner := fmt.Sprintf("quiet-%06d", o)
		wrapped := make([]byte, 72)
		copy(wrapped, owner)
		if _, err := s.CreateOwnerKey(ctx(t), store.OwnerKey{Owner: owner, KeyID: "k-" + owner, Wrapped: wrapped, KEKFingerprint: kek, Created: now}); err != nil {
			t.Fatal(err)
		}
		j := newJob("job-"+owner, store.JobExport, owner, now.Add(time.Minute))
		j.Attempt = 1
		if err := s.CreateJob(ctx(t), j); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishJob(ctx(t), j.ID, 1, store.JobEnd{State: store.JobSucceeded, Progress: []byte{}, Result: []byte{}, At: now}); err != nil {
			t.Fatal(err)
		}
	}
}

// PeriodicQuery is one statement a periodic loop runs, in ? placeholders,
// with its arguments when nothing is due.
type PeriodicQuery struct {
	Name, SQL string
	Args      []any
}

// PeriodicQueries are the statements the server's periodic loops run
// across owners, the store's own text (in ? placeholders), with arguments that find
// nothing due in a fleet FillQuiet made under kek at now: what must read
// the same at 1,000 owners as at 100,000 (issue 52). The expiry
// worker's are TestIdleExpiryIsFlat's.
func PeriodicQueries(kek string, now time.Time) []PeriodicQuery {
	ns := now.UnixNano()
	return []PeriodicQuery{
		{"key worker: owner keys left to rewrap, counted", sqlstore.OwnerKeysToRewrapCount, []any{kek, kek, []byte{}}},
		{"key worker: owner keys left to rewrap, a page", sqlstore.OwnerKeysToRewrap, []any{kek, kek, "", 100}},
		{"key worker: legacy backups, counted", sqlstore.LegacyBackupCount, []any{[]byte{}}},
		{"the KEK check at start: the next KEK of owner keys", sqlstore.NextOwnerKeyKEK, []any{""}},
		{"finished jobs past their time", sqlstore.FinishedJobsDue, []any{ns - int64(time.Hour), 100}},
		{"job takeover: a lease run out", sqlstore.LeaseRunOut, []any{store.JobRunning, ns, 3}},
		{"job takeover: leases run out past their attempts", sqlstore.LeasesPastAttempts, []any{store.JobRunning, ns, 3}},
		{"history sweep", sqlstore.HistoryDue, []any{ns, 100}},
	}
}
