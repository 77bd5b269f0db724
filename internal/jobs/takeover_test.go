package jobs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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

func (c *cutStore) CompleteBackup(ctx context.Context, owner, id string, s store.BackupSummary) error {
	if err := c.refuse(); err != nil {
		return err
	}
	return c.Store.CompleteBackup(ctx, owner, id, s)
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
			go b.m.Run(ctx)
			done := waitDone(t, b.m, j.ID)
			if done.State != store.JobSucceeded || done.Attempt != 2 {
				t.Fatalf("taken-over export: %s at attempt %d (%d %s), want succeeded at attempt 2", done.State, done.Attempt, done.ErrorCode, done.ErrorMessage)
			}
			// Replica a stopped by itself (its own run ended) and ended nothing.
			eventually.True(t, 10*time.Second, func() bool { return a.m.Running() == 0 }, func() string { return "the replica that lost the job still runs it" })
			close(gated.gate)
			md, _ := Progress(done)
			bk, err := base.GetBackup(t.Context(), owner, md.GetBackup())
			if err != nil || bk.State != store.BackupComplete || bk.JobID != j.ID || bk.Summary.Messages != 100 {
				t.Fatalf("backup after takeover: %+v, %v", bk, err)
			}
			key, err := b.m.BackupKey(t.Context(), "tester", owner, bk.ID)
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
	go h.m.Run(ctx)
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
	go h.m.Run(ctx)
	j := waitDone(t, h.m, dead.ID)
	if j.State != store.JobFailed || j.Attempt != 2 || j.ErrorMessage == "" {
		t.Errorf("claimed job without its backup: %s at attempt %d: %d %q", j.State, j.Attempt, j.ErrorCode, j.ErrorMessage)
	}
}
