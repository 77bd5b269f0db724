package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// cutStore is a replica's view of the store that can be cut off, as a
// replica partitioned from its database (or frozen) is: every job write
// fails while cut.
type cutStore struct {
	store.Store
	cut    atomic.Bool
	writes atomic.Int64 // job and catalog writes tried while cut
}

var errCut = fault.New(fault.Unavailable, "the store is cut off")

func (c *cutStore) refuse() error {
	if c.cut.Load() {
		c.writes.Add(1)
		return errCut
	}
	return nil
}

func (c *cutStore) RenewJob(ctx context.Context, id string, attempt int, progress []byte, lease time.Time) (bool, error) {
	if err := c.refuse(); err != nil {
		return false, err
	}
	return c.Store.RenewJob(ctx, id, attempt, progress, lease)
}

func (c *cutStore) FinishJob(ctx context.Context, id string, attempt int, end store.JobEnd) error {
	if err := c.refuse(); err != nil {
		return err
	}
	return c.Store.FinishJob(ctx, id, attempt, end)
}

func (c *cutStore) CompleteBackup(ctx context.Context, owner, id string, by store.Fence, s store.BackupSummary) error {
	if err := c.refuse(); err != nil {
		return err
	}
	return c.Store.CompleteBackup(ctx, owner, id, by, s)
}

func (c *cutStore) AbandonBackup(ctx context.Context, owner, id string, by store.Fence) error {
	if err := c.refuse(); err != nil {
		return err
	}
	return c.Store.AbandonBackup(ctx, owner, id, by)
}

func (c *cutStore) DeleteBackup(ctx context.Context, owner, id string) error {
	if err := c.refuse(); err != nil {
		return err
	}
	return c.Store.DeleteBackup(ctx, owner, id)
}

// replicaOn is a second server on h's store and bucket.
func replicaOn(t *testing.T, h *harness, st store.Store) *harness {
	t.Helper()
	return newHarness(t, st, func(c *Config) {
		c.Buckets = NewBuckets(map[string]string{"local": "file://" + h.dir + "?no_tmp_dir=1&metadata=skip"})
		t.Cleanup(func() { c.Buckets.Close() })
	})
}

// TestJobsOutliveTheirReplica: an export whose server lost the store
// mid-way is taken over by another replica once its lease runs out and
// runs again from the start, as attempt 2, to a complete backup that
// verifies; the replica that lost it stops by itself and never ends it.
func TestJobsOutliveTheirReplica(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			base := e.Open(t)
			cut := &cutStore{Store: base}
			gated := newGated(cut)
			a := newHarness(t, gated)
			owner := storetest.Owner("o")
			fill(t, base, owner, 50)
			j, err := a.m.StartExport(t.Context(), "tester", exportReq(owner, "taken over"))
			if err != nil {
				t.Fatal(err)
			}
			<-gated.reached
			cut.cut.Store(true) // replica a is partitioned, mid-export

			b := replicaOn(t, a, base)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go b.m.Runner.Run(ctx)
			done := waitDone(t, b.m, j.ID)
			if done.State != store.JobSucceeded || done.Attempt != 2 {
				t.Fatalf("taken-over export: %s at attempt %d (%d %s), want succeeded at attempt 2", done.State, done.Attempt, done.ErrorCode, done.ErrorMessage)
			}
			// Replica a stopped by itself (its own run ended) and ended nothing.
			eventually.True(t, 10*time.Second, func() bool { return a.m.Runner.Running() == 0 }, func() string { return "the replica that lost the job still runs it" })
			close(gated.gate)
			md, _ := Progress(done)
			bk, err := base.GetBackup(t.Context(), owner, md.GetBackup())
			if err != nil || bk.State != store.BackupComplete || bk.JobID != j.ID || bk.Summary.Messages != 100 {
				t.Fatalf("backup after takeover: %+v, %v", bk, err)
			}
			key, err := b.m.Catalog.BackupKey(t.Context(), "tester", owner, bk.ID)
			if err != nil {
				t.Fatal(err)
			}
			object, err := os.ReadFile(filepath.Join(a.dir, bk.ObjectKey))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := backup.Verify(bytes.NewReader(object), key, archive.ReaderOptions{})
			if err != nil || rep.Err != nil || rep.Messages != 100 || uint64(len(object)) != bk.Summary.Length {
				t.Errorf("the taken-over export's object: %v, %v, %d messages, %d bytes (catalog %d)", err, rep.Err, rep.Messages, len(object), bk.Summary.Length)
			}
			if got, _ := base.GetJob(t.Context(), j.ID); got.State != store.JobSucceeded {
				t.Errorf("the job ended %s after the lost runner stopped", got.State)
			}
		})
	}
}

// TestImportTakenOverRunsAgain: an import whose server died part-way is
// run again whole by the replica that claims it: what the dead attempt
// applied is met as unchanged, nothing is doubled.
func TestImportTakenOverRunsAgain(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	src, dst := storetest.Owner("src"), storetest.Owner("dst")
	fill(t, st, src, 30)
	ex, err := h.m.StartExport(t.Context(), "tester", exportReq(src, "source"))
	if err != nil {
		t.Fatal(err)
	}
	ex = waitDone(t, h.m, ex.ID)
	md, _ := Progress(ex)
	// The dead attempt applied part of it: one group and its messages.
	if _, err := st.PutGroup(t.Context(), dst, storetest.FullGroup("g-one")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendMessages(t.Context(), dst, storetest.Messages("g-one-m", storetest.GroupID("g-one"), 30, 1000), store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spec, _ := proto.Marshal(&pv.ImportSpec{Owner: dst, SourceOwner: src, Backup: md.GetBackup()})
	progress, _ := proto.Marshal(&pv.JobProgress{Kind: pv.JobKind_JOB_KIND_IMPORT, Owner: dst, Backup: md.GetBackup(), SourceOwner: src})
	dead := store.Job{ID: NewID(now), Kind: store.JobImport, Owner: dst, Principal: "tester", State: store.JobRunning, Attempt: 1,
		Spec: spec, Progress: progress, LeaseUntil: now.Add(-time.Second), Created: now, Updated: now}
	if err := st.CreateJob(t.Context(), dead); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go h.m.Runner.Run(ctx)
	j := waitDone(t, h.m, dead.ID)
	if j.State != store.JobSucceeded || j.Attempt != 2 {
		t.Fatalf("taken-over import: %s at attempt %d (%d %s)", j.State, j.Attempt, j.ErrorCode, j.ErrorMessage)
	}
	result := &pv.ImportJobResult{}
	if err := proto.Unmarshal(j.Result, result); err != nil {
		t.Fatal(err)
	}
	m := result.GetCounts().GetMessages()
	if m.GetInserted() != 30 || m.GetUnchanged() != 30 {
		t.Errorf("messages inserted %d, unchanged %d; want 30 and 30 (the dead attempt's 30 met again)", m.GetInserted(), m.GetUnchanged())
	}
	_, msgs, _ := snapshot(t, st, dst)
	if len(msgs) != 60 {
		t.Errorf("the owner holds %d messages after the rerun, want 60", len(msgs))
	}
}

// TestTakenOverJobThatCannotRun: a claimed export whose catalog row is
// gone ends failed at once, naming why, rather than running or waiting.
func TestTakenOverJobThatCannotRun(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	now := time.Now()
	spec, _ := proto.Marshal(&pv.ExportSpec{Owner: "o"})
	progress, _ := proto.Marshal(&pv.JobProgress{Kind: pv.JobKind_JOB_KIND_EXPORT, Owner: "o", Backup: NewID(now)})
	dead := store.Job{ID: NewID(now), Kind: store.JobExport, Owner: "o", Principal: "p", State: store.JobRunning, Attempt: 1,
		Spec: spec, Progress: progress, LeaseUntil: now.Add(-time.Second), Created: now, Updated: now}
	if err := st.CreateJob(t.Context(), dead); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go h.m.Runner.Run(ctx)
	j := waitDone(t, h.m, dead.ID)
	if j.State != store.JobFailed || j.Attempt != 2 || j.ErrorMessage == "" {
		t.Errorf("claimed job without its backup: %s at attempt %d: %d %q", j.State, j.Attempt, j.ErrorCode, j.ErrorMessage)
	}
}

// stallStore is a replica whose store calls hang, as a replica paused
// (SIGSTOP, a long GC, a hung connection) does: from its first
// CompleteBackup until released, its CompleteBackup and RenewJob block
// whatever their context says, then run as if nothing had happened.
type stallStore struct {
	store.Store
	reached, release chan struct{}
	once             sync.Once
	stalled          atomic.Bool
}

func (s *stallStore) wait(ctx context.Context) context.Context {
	if s.stalled.Load() {
		<-s.release
		// The paused process resumes mid-call: its context is no help
		// to the store, only the fence is.
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (s *stallStore) RenewJob(ctx context.Context, id string, attempt int, progress []byte, lease time.Time) (bool, error) {
	return s.Store.RenewJob(s.wait(ctx), id, attempt, progress, lease)
}

func (s *stallStore) CompleteBackup(ctx context.Context, owner, id string, by store.Fence, sum store.BackupSummary) error {
	s.once.Do(func() { s.stalled.Store(true); close(s.reached) })
	return s.Store.CompleteBackup(s.wait(ctx), owner, id, by, sum)
}

// TestStaleAttemptLeavesTheCommittedBackup: a replica that stalls after
// committing its object and before the catalog's commit loses its lease;
// another replica takes the job over and completes the backup. When the
// first resumes, it neither commits over the backup nor deletes it: the
// backup stays complete, its object there, its digest the catalog's, and
// it restores. (Before attempts were fenced, the resumed replica's
// failure path deleted the object its successor committed under the same
// key.)
func TestStaleAttemptLeavesTheCommittedBackup(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			base := e.Open(t)
			stall := &stallStore{Store: base, reached: make(chan struct{}), release: make(chan struct{})}
			a := newHarness(t, stall)
			owner := storetest.Owner("o")
			fill(t, base, owner, 30)
			j, err := a.m.StartExport(t.Context(), "tester", exportReq(owner, "stale"))
			if err != nil {
				t.Fatal(err)
			}
			<-stall.reached // a has committed its object; its catalog commit hangs

			b := replicaOn(t, a, base)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go b.m.Runner.Run(ctx)
			done := waitDone(t, b.m, j.ID)
			if done.State != store.JobSucceeded || done.Attempt != 2 {
				t.Fatalf("taken-over export: %s at attempt %d (%d %s)", done.State, done.Attempt, done.ErrorCode, done.ErrorMessage)
			}
			close(stall.release) // a resumes
			eventually.True(t, 10*time.Second, func() bool { return a.m.Runner.Running() == 0 }, func() string { return "the stale replica still runs the job" })

			md, _ := Progress(done)
			bk, err := base.GetBackup(t.Context(), owner, md.GetBackup())
			if err != nil || bk.State != store.BackupComplete {
				t.Fatalf("backup after the stale attempt resumed: %+v, %v", bk, err)
			}
			object, err := os.ReadFile(filepath.Join(a.dir, bk.ObjectKey))
			if err != nil {
				t.Fatalf("the committed backup's object after the stale attempt resumed: %v", err)
			}
			if sum := sha256.Sum256(object); !bytes.Equal(sum[:], bk.Summary.SHA256) || uint64(len(object)) != bk.Summary.Length {
				t.Fatalf("object %d bytes, digest %x; the catalog says %d bytes, %x", len(object), sum, bk.Summary.Length, bk.Summary.SHA256)
			}
			if _, err := os.Stat(filepath.Join(a.dir, bk.ObjectKey+SidecarSuffix)); err != nil {
				t.Errorf("the committed backup's sidecar: %v", err)
			}
			key, err := b.m.Catalog.BackupKey(t.Context(), "tester", owner, bk.ID)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := backup.Verify(bytes.NewReader(object), key, archive.ReaderOptions{})
			if err != nil || rep.Err != nil || rep.Messages != 60 {
				t.Errorf("the committed backup does not verify: %v, %v, %d messages", err, rep.Err, rep.Messages)
			}
			// The stale attempt's own object is gone with its failure.
			if _, err := os.Stat(filepath.Join(a.dir, AttemptKey(bk.ObjectKey, 1))); bk.ObjectKey != AttemptKey(bk.ObjectKey, 1) && !os.IsNotExist(err) {
				t.Errorf("the stale attempt's object is left behind: %v", err)
			}
			if got, _ := base.GetJob(t.Context(), j.ID); got.State != store.JobSucceeded || got.Attempt != 2 {
				t.Errorf("job after the stale attempt resumed: %s at attempt %d", got.State, got.Attempt)
			}
		})
	}
}

// hungRenewals is a store whose lease renewals hang, whatever their
// context, until released: a connection that stopped answering.
type hungRenewals struct {
	store.Store
	release chan struct{}
}

func (h *hungRenewals) RenewJob(ctx context.Context, id string, attempt int, progress []byte, lease time.Time) (bool, error) {
	<-h.release
	return h.Store.RenewJob(ctx, id, attempt, progress, lease)
}

// TestRunnerStopsBeforeItsLeaseWhenRenewalsHang: a runner whose renewals
// hang in the store (no error ever comes back) stops its export before
// its lease runs out, so no other replica's attempt overlaps it. (Before
// the watchdog, a hung renewal never reached the "two thirds of a lease"
// check and the runner went on writing past its lease.)
func TestRunnerStopsBeforeItsLeaseWhenRenewalsHang(t *testing.T) {
	base := enginetest.SQLite(t)
	hung := &hungRenewals{Store: base, release: make(chan struct{})}
	gated := newGated(hung)
	h := newHarness(t, gated, func(c *Config) { c.Lease = 6 * time.Second })
	defer close(hung.release)
	owner := storetest.Owner("o")
	fill(t, base, owner, 20)
	j, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "hung"))
	if err != nil {
		t.Fatal(err)
	}
	<-gated.reached
	// The export now waits at its first message for its context: only
	// the runner's own stop ends that wait.
	stored, err := base.GetJob(t.Context(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-gated.stopped:
	case <-time.After(time.Minute):
		t.Fatal("the runner whose renewals hang never stopped its export")
	}
	if stoppedAt := time.Now(); !stoppedAt.Before(stored.LeaseUntil) {
		t.Errorf("the runner stopped at %s, after its lease ran out at %s", stoppedAt.Format(time.StampMilli), stored.LeaseUntil.Format(time.StampMilli))
	}
}

// TestRunnerStopsWhenItsRenewalSaysTakenOver: a renewal that finds the job
// under a later attempt (another replica took it over) stops the runner
// at once, not at its watchdog two thirds of a lease later, and the stale
// runner ends nothing: the job stays the new attempt's. The lease here is
// ten minutes, so only the renewal's answer can stop it within the wait.
func TestRunnerStopsWhenItsRenewalSaysTakenOver(t *testing.T) {
	st, h, _, j := startGated(t, 20, "renewal-lost", func(c *Config) { c.Lease = 10 * time.Minute })
	// Another replica's claim, as its reaper makes it once the lease has
	// run out: the store moves the job to attempt 2.
	claimed, err := st.Store.ClaimJob(t.Context(), time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), 5)
	if err != nil || claimed.ID != j.ID || claimed.Attempt != 2 {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	select {
	case <-st.stopped:
	case <-time.After(time.Minute):
		t.Fatal("the runner went on after its renewal said the job was taken over")
	}
	eventually.True(t, 30*time.Second, func() bool { return h.m.Runner.Running() == 0 }, func() string { return "the stale runner still runs" })
	got, err := st.Store.GetJob(t.Context(), j.ID)
	if err != nil || got.State != store.JobRunning || got.Attempt != 2 {
		t.Errorf("job after the stale runner stopped: %+v, %v; want it running at attempt 2, the taker's", got, err)
	}
}
