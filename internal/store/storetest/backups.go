package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

func writingBackup(owner, id, schedule string) store.Backup {
	return store.Backup{Owner: owner, ID: id, State: store.BackupWriting, Label: "nightly ✓",
		Bucket: "local", ObjectKey: owner + "/" + id + ".xmtpbak", JobID: "j" + id, Schedule: schedule,
		Principal: "alice", Options: []byte{0x08, 0x01}, WrappedKey: bytes.Repeat([]byte{0xAB}, 48),
		Created: time.Unix(0, 1_700_000_000_000_000_000)}
}

// completeAsJob completes b as the export job its row names would: the
// job running at attempt 1 completes it under its fence, then ends.
func completeAsJob(t *testing.T, s store.Store, b store.Backup, sum store.BackupSummary) {
	t.Helper()
	j := newJob(b.JobID, store.JobExport, b.Owner, time.Now().Add(time.Minute))
	j.Attempt = 1
	mustCreate(t, s, j)
	if err := s.CompleteBackup(ctx(t), b.Owner, b.ID, store.Fence{JobID: b.JobID, Attempt: 1}, sum); err != nil {
		t.Fatalf("CompleteBackup %s: %v", b.ID, err)
	}
	if err := s.FinishJob(ctx(t), b.JobID, 1, store.JobEnd{State: store.JobSucceeded, At: time.Now()}); err != nil {
		t.Fatalf("FinishJob %s: %v", b.JobID, err)
	}
}

// testBackupCatalog: a backup is found by (owner, id) only, completes
// once, lists newest first in pages, and deletes.
func testBackupCatalog(t *testing.T, s store.Store) {
	b := writingBackup("alice", "00000000000000010000000000000000", "nightly")
	if err := s.CreateBackup(ctx(t), b); err != nil {
		t.Fatalf("CreateBackup: %v", err)
	}
	if err := s.CreateBackup(ctx(t), b); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("CreateBackup twice: %v, want ErrFailedPrecondition", err)
	}
	got, err := s.GetBackup(ctx(t), "alice", b.ID)
	if err != nil {
		t.Fatalf("GetBackup: %v", err)
	}
	if got.State != store.BackupWriting || got.Label != b.Label || got.ObjectKey != b.ObjectKey || !bytes.Equal(got.WrappedKey, b.WrappedKey) ||
		!bytes.Equal(got.Options, b.Options) || got.Schedule != "nightly" || got.JobID != b.JobID || !got.Created.Equal(b.Created) || !got.Completed.IsZero() {
		t.Fatalf("GetBackup = %+v, want %+v", got, b)
	}
	// Another owner's backup is a missing one, for every method.
	if _, err := s.GetBackup(ctx(t), "bob", b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetBackup as bob: %v, want ErrNotFound", err)
	}
	if err := s.CompleteBackup(ctx(t), "bob", b.ID, store.Fence{}, store.BackupSummary{At: time.Now()}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CompleteBackup as bob: %v, want ErrNotFound", err)
	}
	if err := s.DeleteBackup(ctx(t), "bob", b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteBackup as bob: %v, want ErrNotFound", err)
	}
	if l, err := s.ListBackups(ctx(t), store.BackupQuery{Owner: "bob", Limit: 10}); err != nil || len(l) != 0 {
		t.Fatalf("ListBackups as bob = %d, %v; want none", len(l), err)
	}

	sum := store.BackupSummary{Groups: 1, Messages: 2, Consent: 3, Length: 4096, SHA256: bytes.Repeat([]byte{7}, 32),
		ExportedAtNs: 1_700_000_001_000_000_000, At: time.Unix(0, 1_700_000_002_000_000_000)}
	job := newJob(b.JobID, store.JobExport, "alice", time.Now().Add(time.Minute))
	job.Attempt = 1
	mustCreate(t, s, job)
	if err := s.CompleteBackup(ctx(t), "alice", b.ID, store.Fence{}, sum); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("CompleteBackup of a job's backup without its fence: %v, want ErrFailedPrecondition", err)
	}
	if err := s.CompleteBackup(ctx(t), "alice", b.ID, store.Fence{JobID: b.JobID, Attempt: 1}, sum); err != nil {
		t.Fatalf("CompleteBackup: %v", err)
	}
	if err := s.CompleteBackup(ctx(t), "alice", b.ID, store.Fence{JobID: b.JobID, Attempt: 1}, sum); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("CompleteBackup twice: %v, want ErrFailedPrecondition", err)
	}
	got, err = s.GetBackup(ctx(t), "alice", b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.BackupComplete || got.Summary.Groups != 1 || got.Summary.Messages != 2 || got.Summary.Consent != 3 ||
		got.Summary.Length != 4096 || !bytes.Equal(got.Summary.SHA256, sum.SHA256) || got.Summary.ExportedAtNs != sum.ExportedAtNs ||
		!got.Completed.Equal(sum.At) {
		t.Fatalf("completed backup = %+v", got)
	}

	// Pages, newest first, with the schedule and state filters.
	for i := 2; i <= 7; i++ {
		schedule := "nightly"
		if i%2 == 1 {
			schedule = ""
		}
		if err := s.CreateBackup(ctx(t), writingBackup("alice", fmt.Sprintf("%016x0000000000000000", i), schedule)); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	before := ""
	for {
		page, err := s.ListBackups(ctx(t), store.BackupQuery{Owner: "alice", Before: before, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			ids = append(ids, p.ID[15:16])
			before = p.ID
		}
		if len(page) < 3 {
			break
		}
	}
	if got := fmt.Sprint(ids); got != "[7 6 5 4 3 2 1]" {
		t.Fatalf("ListBackups pages = %s, want newest first", got)
	}
	nightly, err := s.ListBackups(ctx(t), store.BackupQuery{Owner: "alice", Schedule: "nightly", Limit: 10})
	if err != nil || len(nightly) != 4 {
		t.Fatalf("ListBackups schedule=nightly = %d, %v; want 4", len(nightly), err)
	}
	complete, err := s.ListBackups(ctx(t), store.BackupQuery{Owner: "alice", State: store.BackupComplete, Limit: 10})
	if err != nil || len(complete) != 1 || complete[0].ID != b.ID {
		t.Fatalf("ListBackups state=complete = %v, %v; want the one completed", complete, err)
	}

	if err := s.DeleteBackup(ctx(t), "alice", b.ID); err != nil {
		t.Fatalf("DeleteBackup: %v", err)
	}
	if _, err := s.GetBackup(ctx(t), "alice", b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetBackup after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteBackup(ctx(t), "alice", b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteBackup twice: %v, want ErrNotFound", err)
	}
}

// testProbeWrite: health's probe write succeeds on a store with room,
// again and again (it rewrites one row).
func testProbeWrite(t *testing.T, s store.Store) {
	for range 3 {
		if err := s.ProbeWrite(ctx(t)); err != nil {
			t.Fatalf("ProbeWrite: %v", err)
		}
	}
}

// testBackupChains: an increment names its base and records the change
// sequence its snapshot saw; the catalog lists a base's increments and
// refuses to delete a base while an increment needs it.
func testBackupChains(t *testing.T, s store.Store) {
	owner := Owner("chains")
	full := writingBackup(owner, "00000000000000010000000000000000", "nightly")
	inc := writingBackup(owner, "00000000000000020000000000000000", "nightly")
	inc.Base = full.ID
	for _, b := range []store.Backup{full, inc} {
		if err := s.CreateBackup(ctx(t), b); err != nil {
			t.Fatal(err)
		}
		completeAsJob(t, s, b, store.BackupSummary{SHA256: make([]byte, 32), At: time.Now(), ChangeSeq: 41})
	}
	got, err := s.GetBackup(ctx(t), owner, inc.ID)
	if err != nil || got.Base != full.ID || got.Summary.ChangeSeq != 41 {
		t.Fatalf("increment reads back base %q, change sequence %d (%v); want %q, 41", got.Base, got.Summary.ChangeSeq, err, full.ID)
	}
	if got, _ := s.GetBackup(ctx(t), owner, full.ID); got.Base != "" {
		t.Errorf("a full backup reads back base %q", got.Base)
	}
	deps, err := s.ListBackups(ctx(t), store.BackupQuery{Owner: owner, Base: full.ID, Limit: 10})
	if err != nil || len(deps) != 1 || deps[0].ID != inc.ID {
		t.Fatalf("increments of the full: %v, %v; want the one", deps, err)
	}
	// Another owner naming the id sees none of it.
	if deps, _ := s.ListBackups(ctx(t), store.BackupQuery{Owner: "bob", Base: full.ID, Limit: 10}); len(deps) != 0 {
		t.Errorf("another owner lists %d increments", len(deps))
	}
	if err := s.DeleteBackup(ctx(t), owner, full.ID); !errors.Is(err, store.ErrHasIncrement) {
		t.Fatalf("deleting a base an increment needs: %v, want ErrHasIncrement", err)
	}
	if _, err := s.GetBackup(ctx(t), owner, full.ID); err != nil {
		t.Fatalf("the refused delete removed the base: %v", err)
	}
	for _, id := range []string{inc.ID, full.ID} {
		if err := s.DeleteBackup(ctx(t), owner, id); err != nil {
			t.Fatalf("delete %s, newest first: %v", id, err)
		}
	}
}

// testBackupCommitFenced: a backup's row is completed and abandoned only
// by the attempt that holds its job. An attempt that lost its lease to a
// takeover (it paused, or lost the store) can neither commit its object
// over its successor's nor drop the row its successor completed; the row
// names the object the completing attempt wrote.
func testBackupCommitFenced(t *testing.T, s store.Store) {
	owner := Owner("fenced")
	b := writingBackup(owner, "00000000000000030000000000000000", "")
	job := newJob(b.JobID, store.JobExport, owner, time.Now().Add(-time.Second))
	job.Attempt = 1
	mustCreate(t, s, job)
	if err := s.CreateBackup(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimJob(ctx(t), time.Now(), time.Now().Add(time.Minute), 3)
	if err != nil || claimed.ID != b.JobID || claimed.Attempt != 2 {
		t.Fatalf("takeover: %+v, %v", claimed, err)
	}
	stale, current := store.Fence{JobID: b.JobID, Attempt: 1}, store.Fence{JobID: b.JobID, Attempt: 2}
	sum := store.BackupSummary{Length: 10, SHA256: make([]byte, 32), At: time.Now(), ObjectKey: owner + "/attempt-1"}
	var lost *store.FenceLostError
	if err := s.CompleteBackup(ctx(t), owner, b.ID, stale, sum); !errors.As(err, &lost) || lost.Attempt != stale.Attempt || !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("CompleteBackup by the stale attempt: %v, want a FenceLostError", err)
	}
	if err := s.AbandonBackup(ctx(t), owner, b.ID, stale); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("AbandonBackup by the stale attempt of a row its successor writes: %v, want ErrFailedPrecondition", err)
	}
	if err := s.CompleteBackup(ctx(t), owner, b.ID, store.Fence{JobID: "another job", Attempt: 2}, sum); !errors.As(err, &lost) || lost.Owner == "" {
		t.Fatalf("CompleteBackup by another job: %v, want ErrFailedPrecondition", err)
	}
	sum.ObjectKey = owner + "/attempt-2"
	if err := s.CompleteBackup(ctx(t), owner, b.ID, current, sum); err != nil {
		t.Fatalf("CompleteBackup by the attempt holding the job: %v", err)
	}
	if err := s.AbandonBackup(ctx(t), owner, b.ID, stale); !errors.Is(err, store.ErrFailedPrecondition) {
		t.Fatalf("AbandonBackup by the stale attempt of the completed row: %v, want ErrFailedPrecondition", err)
	}
	got, err := s.GetBackup(ctx(t), owner, b.ID)
	if err != nil || got.State != store.BackupComplete || got.ObjectKey != owner+"/attempt-2" {
		t.Fatalf("after the stale attempt's tries: %s at %q (%v), want complete at the successor's key", got.State, got.ObjectKey, err)
	}
	// An attempt that holds its job abandons its own row; once the job
	// has ended, no attempt does.
	other := writingBackup(owner, "00000000000000040000000000000000", "")
	if err := s.FinishJob(ctx(t), b.JobID, 2, store.JobEnd{State: store.JobSucceeded, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	j2 := newJob(other.JobID, store.JobExport, owner, time.Now().Add(time.Minute))
	j2.Attempt = 1
	mustCreate(t, s, j2)
	if err := s.CreateBackup(ctx(t), other); err != nil {
		t.Fatal(err)
	}
	if err := s.AbandonBackup(ctx(t), owner, other.ID, store.Fence{JobID: other.JobID, Attempt: 1}); err != nil {
		t.Fatalf("AbandonBackup by its own attempt: %v", err)
	}
	if _, err := s.GetBackup(ctx(t), owner, other.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("abandoned row: %v, want ErrNotFound", err)
	}
}

// testIncrementAndBaseDeleteSerialize: starting an increment on a base
// and deleting that base, at once, never both succeed: whichever the
// store orders first wins and the other is refused, every round (the row
// lock both take).
func testIncrementAndBaseDeleteSerialize(t *testing.T, s store.Store) {
	owner := Owner("race")
	for round := range 20 {
		base := writingBackup(owner, fmt.Sprintf("%016x0000000000000000", 2*round+1), "")
		if err := s.CreateBackup(ctx(t), base); err != nil {
			t.Fatal(err)
		}
		completeAsJob(t, s, base, store.BackupSummary{SHA256: make([]byte, 32), At: time.Now()})
		inc := writingBackup(owner, fmt.Sprintf("%016x0000000000000000", 2*round+2), "")
		inc.Base = base.ID
		start := make(chan struct{})
		var createErr, deleteErr error
		done := make(chan struct{}, 2)
		go func() {
			<-start
			createErr = s.CreateBackup(ctx(t), inc)
			done <- struct{}{}
		}()
		go func() {
			<-start
			_, deleteErr = s.MarkBackupDeleting(ctx(t), owner, base.ID)
			done <- struct{}{}
		}()
		close(start)
		<-done
		<-done
		if (createErr == nil) == (deleteErr == nil) {
			t.Fatalf("round %d: increment %v, base delete %v: want exactly one to succeed", round, createErr, deleteErr)
		}
		if createErr == nil && !errors.Is(deleteErr, store.ErrHasIncrement) {
			t.Fatalf("round %d: base delete after the increment: %v, want ErrHasIncrement", round, deleteErr)
		}
		if deleteErr == nil && !errors.Is(createErr, store.ErrFailedPrecondition) {
			t.Fatalf("round %d: increment after the base's delete began: %v, want ErrFailedPrecondition", round, createErr)
		}
		if _, err := s.MarkBackupDeleting(ctx(t), owner, inc.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		for _, id := range []string{inc.ID, base.ID} {
			if err := s.DeleteBackup(ctx(t), owner, id); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("round %d: clean up %s: %v", round, id, err)
			}
		}
	}
}

// testBackupAccounting: RecordVerification, OwnerBackupBytes (the quota's
// sum, over complete backups only) and WrappingKEKs (fleet-wide, one
// sample per fingerprint).
func testBackupAccounting(t *testing.T, s store.Store) {
	for i, owner := range []string{"alice", "alice", "bob"} {
		b := writingBackup(owner, fmt.Sprintf("%016x0000000000000000", i+1), "")
		b.KEKFingerprint = []string{"kek-a", "kek-b", "kek-a"}[i]
		if err := s.CreateBackup(ctx(t), b); err != nil {
			t.Fatalf("CreateBackup: %v", err)
		}
		if i < 2 {
			completeAsJob(t, s, b, store.BackupSummary{At: time.Now(), Length: uint64(1000 * (i + 1))})
		}
	}
	if got, err := s.OwnerBackupBytes(ctx(t), "alice"); err != nil || got != 3000 {
		t.Errorf("OwnerBackupBytes(alice) = %d, %v; want 3000", got, err)
	}
	if got, err := s.OwnerBackupBytes(ctx(t), "bob"); err != nil || got != 0 {
		t.Errorf("OwnerBackupBytes(bob) = %d, %v; want 0 (its backup is not complete)", got, err)
	}
	keks, err := s.WrappingKEKs(ctx(t))
	if err != nil || len(keks) != 2 || keks[0].Fingerprint != "kek-a" || keks[1].Fingerprint != "kek-b" || len(keks[0].Sample) == 0 {
		t.Errorf("WrappingKEKs = %+v, %v; want kek-a and kek-b with samples", keks, err)
	}
	id := fmt.Sprintf("%016x0000000000000000", 1)
	if err := s.RecordVerification(ctx(t), "alice", id, time.Unix(0, 1_800_000_000_000_000_000), "sha256 mismatch"); err != nil {
		t.Fatalf("RecordVerification: %v", err)
	}
	got, err := s.GetBackup(ctx(t), "alice", id)
	if err != nil || got.VerifyProblem != "sha256 mismatch" || got.Verified.UnixNano() != 1_800_000_000_000_000_000 {
		t.Errorf("after RecordVerification: %+v, %v", got, err)
	}
	if err := s.RecordVerification(ctx(t), "bob", id, time.Now(), ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RecordVerification of alice's backup as bob: %v, want ErrNotFound", err)
	}
}
