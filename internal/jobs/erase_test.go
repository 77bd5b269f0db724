package jobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// eraseDone runs an erasure to its end and returns the job and result.
func eraseDone(t *testing.T, h *harness, req EraseRequest) (store.Job, *pv.EraseJobResult) {
	t.Helper()
	j, err := h.m.StartErase(t.Context(), "dpo", req)
	if err != nil {
		t.Fatalf("StartErase: %v", err)
	}
	j = waitDone(t, h.m, j.ID)
	result := &pv.EraseJobResult{}
	if j.State == store.JobSucceeded {
		if err := proto.Unmarshal(j.Result, result); err != nil {
			t.Fatal(err)
		}
	}
	return j, result
}

// opens reports whether an archive's bytes read to their end under key.
func opens(body, key []byte) bool {
	r, err := archive.NewReader(bytes.NewReader(body), key, readerOpts)
	if err != nil {
		return false
	}
	for {
		_, err := r.Next()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// ownerObjects lists the bucket's objects under owner's directory.
func ownerObjects(t *testing.T, h *harness, owner string) []string {
	t.Helper()
	var out []string
	it := h.bucket.List(&blob.ListOptions{Prefix: ownerDir("", owner)})
	for {
		o, err := it.Next(t.Context())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o.Key)
	}
}

// TestEraseOwnerLeavesNothingReadable (issue 37): after EraseOwner, a
// copy of one of the owner's backup objects taken before, with its
// catalog row and its owner-key row read from a dump taken before, opens
// under nothing the server still holds: not the KEK, not any owner key
// it holds (the name's new owner's included), not any data key it hands
// out. No row of the owner is left in any owner table but the erasure's
// own record; its objects are gone from the bucket; another owner's
// backups and chain still restore; the name, used again, is a new owner
// that reaches nothing of the old one.
func TestEraseOwnerLeavesNothingReadable(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st)
			ctx := t.Context()
			alice, bob := storetest.Owner("alice"), storetest.Owner("bob")
			fill(t, st, alice, 5)
			fill(t, st, bob, 5)
			aliceFull := exportDone(t, h, exportReq(alice, "full"))
			fill(t, st, alice, 7) // more messages, so the increment holds some
			aliceInc := exportDone(t, h, ExportRequest{Owner: alice, Label: "inc", Since: aliceFull.GetBackup()})
			bobFull := exportDone(t, h, exportReq(bob, "full"))
			fill(t, st, bob, 9)
			bobInc := exportDone(t, h, ExportRequest{Owner: bob, Since: bobFull.GetBackup()})
			// Another owner's hold stops nothing here.
			if _, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: bob, Reason: "another owner's case"}); err != nil {
				t.Fatal(err)
			}

			// What an attacker kept from before: the object, its row, the
			// owner key's row.
			copyOf, err := h.bucket.ReadAll(ctx, aliceInc.GetArchive().GetKey())
			if err != nil {
				t.Fatal(err)
			}
			dumpRow, err := st.GetBackup(ctx, alice, aliceInc.GetBackup())
			if err != nil {
				t.Fatal(err)
			}
			dumpKey, err := st.GetOwnerKey(ctx, alice)
			if err != nil {
				t.Fatal(err)
			}
			before, err := h.m.Keys.unwrap(ctx, dumpRow)
			if err != nil || !opens(copyOf, before) {
				t.Fatalf("before the erasure the backup opens: %v", err)
			}

			// A dry run first: it reports and deletes nothing.
			_, dry := eraseDone(t, h, EraseRequest{Owner: alice, DryRun: true})
			if !dry.GetDryRun() || dry.GetKeyDestroyed() || dry.GetBackups() != 2 || dry.GetObjects() != 4 {
				t.Fatalf("dry run: %v", dry)
			}
			for _, r := range dry.GetRows() {
				if r.GetTable() == "jobs" && r.GetRows() != 2 {
					t.Errorf("the dry run counts %d jobs; the owner has its 2 exports (it does not count itself)", r.GetRows())
				}
			}
			if _, err := st.GetOwnerKey(ctx, alice); err != nil {
				t.Fatalf("a dry run touched the owner key: %v", err)
			}

			j, res := eraseDone(t, h, EraseRequest{Owner: alice})
			if j.State != store.JobSucceeded || !res.GetKeyDestroyed() || res.GetBackups() != 2 || res.GetObjects() != 4 {
				t.Fatalf("erasure ended %s (%s): %v", j.State, j.ErrorMessage, res)
			}
			rows := map[string]int64{}
			for _, r := range res.GetRows() {
				rows[r.GetTable()] = r.GetRows()
			}
			if rows["messages"] != 2*7 || rows["groups"] != 2 || rows["backups"] != 2 || rows["jobs"] != 3 {
				t.Errorf("erasure's counts: %v", rows)
			}

			// Nothing the server holds opens the copy.
			if _, err := h.m.Keys.unwrap(ctx, dumpRow); !errors.Is(err, ErrKeyUnavailable) {
				t.Errorf("the dump's catalog row after the erasure: %v, want ErrKeyUnavailable", err)
			}
			if _, err := h.m.cfg.KEK.Unwrap(ctx, dumpRow.WrappedKey); err == nil {
				t.Error("the KEK opens the dump row's data key directly")
			}
			// The name used again: a new owner, with a key of its own.
			fill(t, st, alice, 2)
			newAlice := exportDone(t, h, exportReq(alice, "new owner"))
			newRow, err := st.GetOwnerKey(ctx, alice)
			if err != nil || newRow.KeyID == dumpKey.KeyID {
				t.Fatalf("the reused name's owner key %q, the erased one's %q (%v)", newRow.KeyID, dumpKey.KeyID, err)
			}
			var keys [][]byte
			for _, owner := range []string{alice, bob} {
				k, _, err := h.m.Keys.ownerKey(ctx, owner, false)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := keyring.OpenDataKey(k, dumpRow.WrappedKey, dumpRow.Owner, dumpRow.ID); err == nil {
					t.Errorf("%s's owner key opens the erased owner's data key", owner)
				}
				keys = append(keys, k)
			}
			for _, b := range []string{newAlice.GetBackup(), bobFull.GetBackup(), bobInc.GetBackup()} {
				owner := bob
				if b == newAlice.GetBackup() {
					owner = alice
				}
				k, err := h.m.Catalog.BackupKey(ctx, "tester", owner, b)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			keys = append(keys, dumpKey.Wrapped) // the dump's own bytes, as a key
			for i, k := range keys {
				if len(k) == 32 && opens(copyOf, k) {
					t.Errorf("key %d the server still holds opens the erased owner's backup", i)
				}
			}
			// The old row put back into the catalog reaches nothing.
			dumpRow.Base = "" // its base is gone with it
			if err := st.CreateBackup(ctx, dumpRow); err != nil {
				t.Fatal(err)
			}
			if _, err := h.m.Catalog.BackupKey(ctx, "tester", alice, dumpRow.ID); !errors.Is(err, ErrKeyUnavailable) {
				t.Errorf("the old row restored into the catalog: %v, want ErrKeyUnavailable", err)
			}
			if err := st.DeleteBackup(ctx, alice, dumpRow.ID); err != nil {
				t.Fatal(err)
			}

			// No row of the erased owner but the new one's and the audit
			// record: counted before the name was reused, above, and here
			// after erasing the new owner too.
			j2, _ := eraseDone(t, h, EraseRequest{Owner: alice})
			left, err := st.CountOwnerRows(ctx, alice)
			if err != nil {
				t.Fatal(err)
			}
			for _, table := range store.OwnerRowTables {
				want := int64(0)
				if table == "jobs" {
					want = 2 // both erasures' records (finding 6)
				}
				if left[table] != want {
					t.Errorf("%s: %d rows of the erased owner, want %d", table, left[table], want)
				}
			}
			for _, id := range []string{j.ID, j2.ID} {
				if kept, err := st.GetJob(ctx, id); err != nil || kept.Kind != store.JobErase || kept.Principal != "dpo" {
					t.Errorf("the audit record %s: %+v, %v", id, kept, err)
				}
			}
			if _, err := os.Stat(filepath.Join(h.dir, strings.TrimSuffix(ownerDir("", alice), "/"))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the erased owner's directory in the file bucket: %v, want it gone", err)
			}
			if objs := ownerObjects(t, h, alice); len(objs) != 0 {
				t.Errorf("objects of the erased owner left in the bucket: %v", objs)
			}

			// Another owner's chain still restores.
			other := storetest.Owner("restored-bob")
			importDone(t, h, other, bob, bobFull.GetBackup())
			importDone(t, h, other, bob, bobInc.GetBackup())
			wantG, wantM, wantC := snapshot(t, st, bob)
			gotG, gotM, gotC := snapshot(t, st, other)
			if len(gotG) != len(wantG) || len(gotM) != len(wantM) || len(gotC) != len(wantC) {
				t.Errorf("bob's chain restored %d/%d/%d records, bob has %d/%d/%d", len(gotG), len(gotM), len(gotC), len(wantG), len(wantM), len(wantC))
			}
		})
	}
}

// TestEraseRefusedUnderHold (issue 37): an owner with a hold in force, on
// itself or on one of its backups, is not erased (ErrHeld, nothing
// touched); nor one with an export running; a lapsed hold does not stop
// it; once the hold is released the erasure runs.
func TestEraseRefusedUnderHold(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	ctx := t.Context()
	owner := storetest.Owner("held")
	fill(t, st, owner, 3)
	b := exportDone(t, h, exportReq(owner, "evidence"))
	for _, hold := range []store.Hold{{Owner: owner, Reason: "case 7"}, {Owner: owner, Backup: b.GetBackup(), Reason: "case 8"}} {
		if _, err := h.m.Catalog.SetHold(ctx, "legal", hold); err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.StartErase(ctx, "dpo", EraseRequest{Owner: owner}); !errors.Is(err, ErrHeld) {
			t.Fatalf("erasing under hold %+v: %v, want ErrHeld", hold, err)
		}
		if _, err := st.GetOwnerKey(ctx, owner); err != nil {
			t.Fatalf("a refused erasure touched the owner key: %v", err)
		}
		if _, err := h.m.Catalog.ReleaseHold(ctx, "legal", owner, hold.Backup, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, Reason: "lapsing", Until: time.Now().Add(150 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	j, res := eraseDone(t, h, EraseRequest{Owner: owner})
	if j.State != store.JobSucceeded || res.GetBackups() != 1 {
		t.Fatalf("after the holds lapsed or were released: %s %s %v", j.State, j.ErrorMessage, res)
	}
}

// failingErase fails the first EraseOwnerRows, as a crash between the
// erasure's steps would leave it.
type failingErase struct {
	store.Store
	failed bool
}

func (f *failingErase) EraseOwnerRows(ctx context.Context, owner, keep string) (map[string]int64, error) {
	if !f.failed {
		f.failed = true
		return nil, fmt.Errorf("the store went away: %w", context.DeadlineExceeded)
	}
	return f.Store.EraseOwnerRows(ctx, owner, keep)
}

// TestEraseResumes (issue 37): an erasure cut short after its key and
// objects went runs again to the end: the key stays destroyed, what was
// deleted is not needed again, and the rows go.
func TestEraseResumes(t *testing.T) {
	st := &failingErase{Store: enginetest.SQLite(t)}
	h := newHarness(t, st)
	owner := storetest.Owner("resumed")
	fill(t, st, owner, 3)
	exportDone(t, h, exportReq(owner, "one"))
	j, _ := eraseDone(t, h, EraseRequest{Owner: owner})
	if j.State != store.JobFailed || !strings.Contains(j.ErrorMessage, "starting the erasure again finishes it") {
		t.Fatalf("the cut-short erasure: %s %q", j.State, j.ErrorMessage)
	}
	if _, err := st.GetOwnerKey(t.Context(), owner); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the owner key after the first step: %v", err)
	}
	j, res := eraseDone(t, h, EraseRequest{Owner: owner})
	if j.State != store.JobSucceeded || res.GetBackups() != 0 {
		t.Fatalf("the erasure run again: %s %s %v", j.State, j.ErrorMessage, res)
	}
	left, err := st.CountOwnerRows(t.Context(), owner)
	if err != nil {
		t.Fatal(err)
	}
	for table, n := range left {
		// Both erasures' records stay: the cut-short one's too (finding 6).
		if n != 0 && table != "jobs" || table == "jobs" && n != 2 {
			t.Errorf("%s: %d rows left", table, n)
		}
	}
}

// TestHeldBackupsSurviveRetention (issue 37): a schedule's retention that
// would delete a held backup keeps it (and the plan says "hold");
// DeleteBackup is refused; verification still runs on it; once the hold
// is released the next retention run deletes it.
func TestHeldBackupsSurviveRetention(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	ctx := t.Context()
	owner := storetest.Owner("case")
	fill(t, st, owner, 3)
	policy, err := ParseSchedules(fmt.Appendf(nil, "schedules:\n  - name: nightly\n    cron: \"0 3 * * *\"\n    owners: [%q]\n    bucket: local\n    keep: 1\n", owner))
	if err != nil {
		t.Fatal(err)
	}
	s := policy.Schedules[0]
	h.m.Catalog.schedules.Store(policy)
	var ids []string
	for i := range 3 {
		j, err := h.m.exports.start(ctx, "schedule:nightly", ExportRequest{Owner: owner, Bucket: "local", Label: fmt.Sprint(i)}, s)
		if err != nil {
			t.Fatal(err)
		}
		done := waitDone(t, h.m, j.ID)
		md, _ := Progress(done)
		ids = append(ids, md.GetBackup())
		if i == 0 {
			if _, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, Backup: ids[0], Reason: "case 12"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Retention runs after each export's job has ended: wait for the
	// last run's.
	var list []store.Backup
	eventually.True(t, 10*time.Second, func() bool {
		list, _ = st.ListBackups(ctx, store.BackupQuery{Owner: owner, Limit: 10})
		return len(list) == 2
	}, func() string { return fmt.Sprintf("%d backups", len(list)) })
	if list[1].ID != ids[0] || list[0].ID != ids[2] {
		t.Fatalf("after three runs keeping 1 with the first held: %s and %s, want %s and %s", list[0].ID, list[1].ID, ids[2], ids[0])
	}
	plan, err := h.m.Catalog.PlanRetention(ctx, owner, "nightly", nil)
	if err != nil || len(plan.Keep) != 2 || plan.Keep[1].Backup.ID != ids[0] || plan.Keep[1].Rules[0] != "hold" {
		t.Fatalf("the plan: %+v, %v; want the held backup kept by \"hold\"", plan.Keep, err)
	}
	if err := h.m.Catalog.DeleteBackup(ctx, "tester", owner, ids[0]); !errors.Is(err, ErrHeld) {
		t.Fatalf("DeleteBackup of a held backup: %v, want ErrHeld", err)
	}
	if b, err := h.m.Verifier.VerifyBackup(ctx, "tester", owner, ids[0]); err != nil || b.Verified.IsZero() || b.VerifyProblem != "" {
		t.Fatalf("verifying a held backup: %v %q", err, b.VerifyProblem)
	}
	if _, err := h.m.Catalog.ReleaseHold(ctx, "legal", owner, ids[0], ""); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Catalog.Prune(ctx, s, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetBackup(ctx, owner, ids[0]); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the released backup after the next retention: %v", err)
	}

	// A hold on the owner keeps every backup of it through retention,
	// and refuses its erasure; released, the next retention proceeds.
	if _, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, Reason: "case 13"}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		j, err := h.m.exports.start(ctx, "schedule:nightly", ExportRequest{Owner: owner, Bucket: "local", Label: fmt.Sprint("held ", i)}, s)
		if err != nil {
			t.Fatal(err)
		}
		waitDone(t, h.m, j.ID)
	}
	if err := h.m.Catalog.Prune(ctx, s, owner); err != nil {
		t.Fatal(err)
	}
	if list, _ := st.ListBackups(ctx, store.BackupQuery{Owner: owner, Limit: 10}); len(list) != 3 {
		t.Fatalf("under an owner hold, retention keeping 1 left %d backups of 3", len(list))
	}
	if _, err := h.m.StartErase(ctx, "dpo", EraseRequest{Owner: owner}); !errors.Is(err, ErrHeld) {
		t.Fatalf("erasing a held owner: %v", err)
	}
	if _, err := h.m.Catalog.ReleaseHold(ctx, "legal", owner, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Catalog.Prune(ctx, s, owner); err != nil {
		t.Fatal(err)
	}
	if list, _ := st.ListBackups(ctx, store.BackupQuery{Owner: owner, Limit: 10}); len(list) != 1 {
		t.Fatalf("after the owner hold's release, retention keeping 1 left %d backups", len(list))
	}
}

// TestEraseTakenOver (issue 37): an erasure whose server died after its
// first step (the owner key destroyed; the job's lease run out) is taken
// over by another replica, which finishes it: the objects and rows go,
// and the erasure's record ends succeeded.
func TestEraseTakenOver(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st, func(c *Config) { c.Lease = 300 * time.Millisecond })
			ctx := t.Context()
			owner := storetest.Owner("dead-eraser")
			fill(t, st, owner, 3)
			exportDone(t, h, exportReq(owner, "one"))
			// The dead replica's work: the job stored, its key destroyed,
			// its lease left to run out.
			spec, _ := EraseRequest{Owner: owner}.spec()
			progress, _ := proto.Marshal(&pv.JobProgress{Kind: pv.JobKind_JOB_KIND_ERASE, Owner: owner, Principal: "dpo"})
			now := time.Now()
			j := store.Job{ID: NewID(now), Kind: store.JobErase, Owner: owner, Principal: "dpo", State: store.JobRunning, Attempt: 1,
				Spec: spec, Progress: progress, LeaseUntil: now.Add(-time.Second), Created: now, Updated: now}
			if err := st.CreateJob(ctx, j); err != nil {
				t.Fatal(err)
			}
			if err := st.DestroyOwnerKey(ctx, owner); err != nil {
				t.Fatal(err)
			}
			go h.m.Runner.Run(ctx)
			done := waitDone(t, h.m, j.ID)
			if done.State != store.JobSucceeded || done.Attempt != 2 {
				t.Fatalf("the taken-over erasure: %s at attempt %d: %s", done.State, done.Attempt, done.ErrorMessage)
			}
			left, err := st.CountOwnerRows(ctx, owner)
			if err != nil {
				t.Fatal(err)
			}
			for table, n := range left {
				if want := map[bool]int64{true: 1, false: 0}[table == "jobs"]; n != want {
					t.Errorf("%s: %d rows left, want %d", table, n, want)
				}
			}
			if objs := ownerObjects(t, h, owner); len(objs) != 0 {
				t.Errorf("objects left: %v", objs)
			}
		})
	}
}

// TestEraseEveryBucket (issue 37): an owner's backups in two buckets,
// and an object a crash left in the second under the owner's directory,
// all go; an owner whose name is a schedule's prefix reaches no other
// owner's objects under that prefix.
func TestEraseEveryBucket(t *testing.T) {
	st := enginetest.SQLite(t)
	second := t.TempDir()
	h := newHarness(t, st, func(c *Config) {
		c.Buckets = NewBuckets(map[string]string{"local": "file://" + t.TempDir() + "?no_tmp_dir=1&metadata=skip", "second": "file://" + second + "?no_tmp_dir=1&metadata=skip"})
	})
	h.bucket, _ = h.m.cfg.Buckets.Open(t.Context(), "local")
	ctx := t.Context()
	owner := "nightly" // also the schedule's prefix below
	bob := storetest.Owner("bob")
	fill(t, st, owner, 2)
	fill(t, st, bob, 2)
	policy, err := ParseSchedules(fmt.Appendf(nil, "schedules:\n  - name: nightly\n    cron: \"0 3 * * *\"\n    owners: [%q]\n    bucket: second\n    prefix: nightly/\n    keep: 5\n", bob))
	if err != nil {
		t.Fatal(err)
	}
	h.m.Catalog.schedules.Store(policy)
	exportDone(t, h, exportReq(owner, "local"))
	exportDone(t, h, ExportRequest{Owner: owner, Bucket: "second", Label: "second"})
	sj, err := h.m.exports.start(ctx, "schedule:nightly", ExportRequest{Owner: bob, Bucket: "second"}, policy.Schedules[0])
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h.m, sj.ID)
	secondBucket, _ := h.m.cfg.Buckets.Open(ctx, "second")
	orphan := ownerDir("", owner) + NewID(time.Now()) + ".attempt-2" + ArchiveSuffix
	if err := secondBucket.WriteAll(ctx, orphan, []byte("left by a crash"), nil); err != nil {
		t.Fatal(err)
	}
	bobsDir := "/" + ownerDir("nightly/", bob)
	var bobsBefore []string
	for _, f := range files(t, second) {
		if strings.HasPrefix(f, bobsDir) {
			bobsBefore = append(bobsBefore, f)
		}
	}
	if len(bobsBefore) == 0 {
		t.Fatal("bob's scheduled backup is not under nightly/")
	}
	_, res := eraseDone(t, h, EraseRequest{Owner: owner})
	if res.GetBackups() != 2 || res.GetObjects() != 5 {
		t.Errorf("erasure: %v; want 2 backups, 5 objects (2 archives, 2 sidecars, the orphan)", res)
	}
	after := files(t, second)
	if fmt.Sprint(after) != fmt.Sprint(bobsBefore) {
		t.Errorf("the second bucket after the erasure holds %v; want bob's objects only, %v", after, bobsBefore)
	}
}

// TestEraseDryRunIsAnOrdinaryJob (issue 37): a dry run is no audit
// record: once ended it expires with the finished jobs and can be
// deleted, where an erasure's record is kept; its failure message does
// not speak of an import.
func TestEraseDryRunIsAnOrdinaryJob(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st, func(c *Config) { c.KeepFinished = time.Millisecond })
	owner := storetest.Owner("dry")
	fill(t, st, owner, 1)
	dry, res := eraseDone(t, h, EraseRequest{Owner: owner, DryRun: true})
	if dry.Kind != store.JobEraseDryRun || !res.GetDryRun() || res.GetKeyDestroyed() {
		t.Fatalf("the dry run: kind %s, %v", dry.Kind, res)
	}
	md, _ := Progress(dry)
	if md.GetKind() != pv.JobKind_JOB_KIND_ERASE || !md.GetValidateOnly() {
		t.Fatalf("the dry run's metadata: %v", md)
	}
	real, _ := eraseDone(t, h, EraseRequest{Owner: storetest.Owner("other")})
	time.Sleep(5 * time.Millisecond)
	n, err := st.DeleteFinishedJobs(t.Context(), time.Now(), 100)
	if err != nil || n != 1 {
		t.Fatalf("DeleteFinishedJobs: %d, %v; want the dry run only", n, err)
	}
	if _, err := st.GetJob(t.Context(), dry.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the ended dry run: %v", err)
	}
	if _, err := st.GetJob(t.Context(), real.ID); err != nil {
		t.Errorf("the erasure's record: %v", err)
	}
	if got := "cancelled" + h.m.Runner.kinds[store.JobEraseDryRun].leftBehind(true); strings.Contains(got, "import") || !strings.Contains(got, "erases nothing") {
		t.Errorf("a dry run's end: %q", got)
	}
}

// TestErasureLeavesNothingInTheSQLiteFiles (issue 46, finding 1 on
// SQLite): after an erasure, the live database files (the database, its
// WAL and shared memory) hold none of the owner's message bodies, neither
// its KEK-wrapped owner key nor the sealed data keys of its backups;
// before, deleted rows stayed in free pages and the WAL (96 of 100
// deleted 1 MiB bodies were found in clear). A message deleted before the
// erasure is scrubbed too.
func TestErasureLeavesNothingInTheSQLiteFiles(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), dir, sqlite.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newHarness(t, st)
	ctx := t.Context()
	owner := storetest.Owner("forensic")
	g := storetest.FullGroup("forensic")
	if _, err := st.PutGroup(ctx, owner, g); err != nil {
		t.Fatal(err)
	}
	var secrets [][]byte
	var msgs []*mb.GroupMessageSave
	for i := range 40 {
		m := storetest.Message(fmt.Sprintf("forensic-%d", i), g.Id, int64(i))
		m.DecryptedMessageBytes = make([]byte, 8<<10)
		_, _ = rand.Read(m.DecryptedMessageBytes)
		secrets = append(secrets, m.DecryptedMessageBytes)
		msgs = append(msgs, m)
	}
	if _, err := st.AppendMessages(ctx, owner, msgs, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMessage(ctx, owner, g.Id, msgs[0].Id, func(*mb.GroupMessageSave, *gb.GroupSave) error { return nil }); err != nil {
		t.Fatal(err)
	}
	res := exportDone(t, h, exportReq(owner, "evidence"))
	key, err := st.GetOwnerKey(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.GetBackup(ctx, owner, res.GetBackup())
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, key.Wrapped, b.WrappedKey)

	found := func() []string {
		var out []string
		files, _ := filepath.Glob(filepath.Join(dir, sqlite.FileName+"*"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range secrets {
				// Any 32 bytes of it is enough to find it.
				if bytes.Contains(data, s[len(s)/2:len(s)/2+16]) {
					out = append(out, fmt.Sprintf("secret %d in %s", i, filepath.Base(f)))
				}
			}
		}
		return out
	}
	if got := found(); len(got) < len(secrets)-1 {
		t.Fatalf("before the erasure the files hold %d of the %d secrets: the scan does not see them", len(got), len(secrets))
	}
	if j, _ := eraseDone(t, h, EraseRequest{Owner: owner}); j.State != store.JobSucceeded {
		t.Fatalf("erasure ended %s: %s", j.State, j.ErrorMessage)
	}
	if got := found(); len(got) > 0 {
		t.Errorf("after the erasure the live files still hold: %v", got)
	}
}

// TestErasedOwnerStaysErased (issue 46, finding 6): a schedule that still
// lists an erased owner skips it at every tick, counted "erased", while a
// device writes under the name again; only after an operator re-enables
// the name, saying why, does the schedule back it up; a second erasure
// blocks it again, and both erasures' records are kept.
func TestErasedOwnerStaysErased(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			var mu sync.Mutex
			outcomes := map[string]int{}
			h := newHarness(t, st, func(c *Config) {
				c.ScheduleRun = func(_, outcome string) {
					mu.Lock()
					outcomes[outcome]++
					mu.Unlock()
				}
			})
			ctx := t.Context()
			gone, other := storetest.Owner("gone"), storetest.Owner("other")
			fill(t, st, gone, 2)
			fill(t, st, other, 2)
			policy, err := ParseSchedules(fmt.Appendf(nil, `
schedules:
  - name: nightly
    cron: "0 3 * * *"
    owners: [%q, %q]
    bucket: local
    keep: 5
`, gone, other))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := NewScheduler(ctx, h.m, policy)
			if err != nil {
				t.Fatal(err)
			}
			s := policy.Schedules[0]
			day := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
			fire := func(n int) []string {
				ids := sc.Fire(ctx, s, day.Add(time.Duration(n)*24*time.Hour))
				for _, id := range ids {
					waitDone(t, h.m, id)
				}
				return ids
			}
			if ids := fire(0); len(ids) != 2 {
				t.Fatalf("first tick started %d exports, want 2", len(ids))
			}
			first, _ := eraseDone(t, h, EraseRequest{Owner: gone})
			if first.State != store.JobSucceeded {
				t.Fatalf("erasure: %s", first.ErrorMessage)
			}
			fill(t, st, gone, 1) // a device still writing under the name
			for n := 1; n <= 2; n++ {
				if ids := fire(n); len(ids) != 1 {
					t.Fatalf("tick %d after the erasure started %d exports, want only the other owner's", n, len(ids))
				}
			}
			if list, _ := st.ListBackups(ctx, store.BackupQuery{Owner: gone, Limit: 10}); len(list) != 0 {
				t.Fatalf("the erased owner has %d new backups", len(list))
			}
			mu.Lock()
			erasedTicks := outcomes["erased"]
			mu.Unlock()
			if erasedTicks != 2 {
				t.Fatalf("ticks counted erased: %d, want 2", erasedTicks)
			}
			if _, err := h.m.ReenableOwner(ctx, "dpo", gone, ""); !errors.Is(err, ErrInvalid) {
				t.Fatalf("re-enabling without a reason: %v, want ErrInvalid", err)
			}
			if _, err := h.m.ReenableOwner(ctx, "dpo", other, "never erased"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("re-enabling a name never erased: %v, want ErrNotFound", err)
			}
			rec, err := h.m.ReenableOwner(ctx, "dpo", gone, "the number now belongs to a new subscriber")
			if err != nil || rec.Blocked() || rec.Job != first.ID {
				t.Fatalf("ReenableOwner: %+v, %v", rec, err)
			}
			if ids := fire(3); len(ids) != 2 {
				t.Fatalf("after the re-enabling the tick started %d exports, want 2", len(ids))
			}
			second, _ := eraseDone(t, h, EraseRequest{Owner: gone})
			if second.State != store.JobSucceeded {
				t.Fatalf("second erasure: %s", second.ErrorMessage)
			}
			if rec, err := h.m.OwnerErasure(ctx, gone); err != nil || !rec.Blocked() || rec.Job != second.ID {
				t.Fatalf("after the second erasure: %+v, %v; want blocked again", rec, err)
			}
			if ids := fire(4); len(ids) != 1 {
				t.Fatalf("after the second erasure the tick started %d exports, want 1", len(ids))
			}
			if n, err := h.m.erasures.erasureRecords(ctx, gone); err != nil || n != 2 {
				t.Fatalf("erasure records kept: %d, %v; want both", n, err)
			}
		})
	}
}

// TestHoldsAreRecords (issue 46, finding 9): each hold is its own record.
// A second holder's hold on the same backup, ending soon, leaves the first
// (indefinite) one standing, and the backup stays held after it lapses;
// releasing one matter leaves another's; a release that does not say
// which of several holds is refused; a hold is changed only by its id,
// on its own target; ids are the server's.
func TestHoldsAreRecords(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st)
			ctx := t.Context()
			owner := storetest.Owner("held")
			fill(t, st, owner, 2)
			b := exportDone(t, h, exportReq(owner, "evidence")).GetBackup()
			first, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, Backup: b, Reason: "matter A"})
			if err != nil || len(first.ID) != 32 {
				t.Fatalf("SetHold: %+v, %v", first, err)
			}
			second, err := h.m.Catalog.SetHold(ctx, "regulator", store.Hold{Owner: owner, Backup: b, Reason: "matter B", Until: time.Now().Add(100 * time.Millisecond)})
			if err != nil || second.ID == first.ID {
				t.Fatalf("a second holder's hold: %+v, %v; want a hold of its own", second, err)
			}
			time.Sleep(150 * time.Millisecond) // the second lapses
			if err := h.m.Catalog.DeleteBackup(ctx, "tester", owner, b); !errors.Is(err, ErrHeld) {
				t.Fatalf("DeleteBackup once the second hold lapsed: %v; the first still holds", err)
			}
			third, err := h.m.Catalog.SetHold(ctx, "regulator", store.Hold{Owner: owner, Backup: b, Reason: "matter C"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.m.Catalog.ReleaseHold(ctx, "legal", owner, b, ""); !errors.Is(err, ErrHoldAmbiguous) {
				t.Fatalf("a release that names no hold among three: %v, want ErrHoldAmbiguous", err)
			}
			if _, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, ID: first.ID, Reason: "moved to the owner"}); !errors.Is(err, ErrHoldNotFound) {
				t.Fatalf("changing a backup's hold into an owner hold: %v, want ErrHoldNotFound", err)
			}
			if _, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, Backup: b, ID: "0123", Reason: "x"}); !errors.Is(err, ErrInvalid) {
				t.Fatalf("a malformed hold id: %v, want ErrInvalid", err)
			}
			changed, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, Backup: b, ID: first.ID, Reason: "matter A, widened"})
			if err != nil || changed.ID != first.ID || !changed.Created.Equal(first.Created) {
				t.Fatalf("changing a hold: %+v, %v", changed, err)
			}
			released, err := h.m.Catalog.ReleaseHold(ctx, "regulator", owner, b, third.ID)
			if err != nil || released.Reason != "matter C" {
				t.Fatalf("releasing matter C: %+v, %v", released, err)
			}
			if err := h.m.Catalog.DeleteBackup(ctx, "tester", owner, b); !errors.Is(err, ErrHeld) {
				t.Fatalf("DeleteBackup after matter C's release: %v; matter A still holds", err)
			}
			holds, err := h.m.Catalog.Holds(ctx, owner)
			if err != nil || len(holds) != 2 {
				t.Fatalf("holds: %+v, %v; want A (changed) and B (lapsed)", holds, err)
			}
			for _, x := range holds {
				if x.ID == first.ID && x.Reason != "matter A, widened" {
					t.Fatalf("matter A's hold: %+v", x)
				}
			}
			if _, err := h.m.Catalog.ReleaseHold(ctx, "legal", owner, b, first.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := h.m.Catalog.ReleaseHold(ctx, "legal", owner, b, ""); err != nil {
				t.Fatalf("releasing the one hold left (lapsed) without its id: %v", err)
			}
			if err := h.m.Catalog.DeleteBackup(ctx, "tester", owner, b); err != nil {
				t.Fatalf("DeleteBackup with no hold left: %v", err)
			}
		})
	}
}

// TestHoldsPerOwnerBounded: an owner holds at most MaxHoldsPerOwner holds;
// past it a new one is refused (RESOURCE_EXHAUSTED), and a change of one
// that stands is not.
func TestHoldsPerOwnerBounded(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	ctx := t.Context()
	owner := storetest.Owner("many")
	for i := range MaxHoldsPerOwner {
		if err := st.SetHold(ctx, store.Hold{Owner: owner, ID: fmt.Sprintf("%032x", i), Reason: "r", Principal: "legal", Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, Reason: "one more"}); !errors.Is(err, ErrTooManyHolds) {
		t.Fatalf("hold %d: %v, want ErrTooManyHolds", MaxHoldsPerOwner+1, err)
	}
	if _, err := h.m.Catalog.SetHold(ctx, "legal", store.Hold{Owner: owner, ID: fmt.Sprintf("%032x", 7), Reason: "changed"}); err != nil {
		t.Fatalf("changing a hold at the bound: %v", err)
	}
}

// TestErasureCancelsTheOwnersJobs (issue 46, findings 2 and 3): an
// erasure started while an export of the owner runs cancels it, waits for
// it to end, and erases; the export ends CANCELLED with nothing written,
// and the erasure's result counts it. A dry run counts what it would
// cancel and cancels nothing.
func TestErasureCancelsTheOwnersJobs(t *testing.T) {
	gated, h, owner, running := startGated(t, 50, "")
	ctx := t.Context()
	_, dry := eraseDone(t, h, EraseRequest{Owner: owner, DryRun: true})
	if dry.GetJobsCancelled() != 1 {
		t.Fatalf("dry run: %d jobs would be cancelled, want 1", dry.GetJobsCancelled())
	}
	if j, _ := h.m.cfg.Store.GetJob(ctx, running.ID); j.State != store.JobRunning {
		t.Fatalf("the dry run stopped the export: %s", j.State)
	}
	j, res := eraseDone(t, h, EraseRequest{Owner: owner})
	if j.State != store.JobSucceeded || res.GetJobsCancelled() != 1 || !res.GetKeyDestroyed() {
		t.Fatalf("erasure: %s %s %v", j.State, j.ErrorMessage, res)
	}
	select {
	case <-gated.stopped:
	default:
		t.Fatal("the export's context did not end")
	}
	// It ended before the erasure erased its owner's rows, its job
	// row with them.
	if _, err := h.m.cfg.Store.GetJob(ctx, running.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the export's job after the erasure: %v, want it erased", err)
	}
	if list, _ := h.m.cfg.Store.ListBackups(ctx, store.BackupQuery{Owner: owner, Limit: 10}); len(list) != 0 {
		t.Fatalf("backups of the erased owner: %d", len(list))
	}
	if names := files(t, h.dir); len(names) != 0 {
		t.Fatalf("objects left: %v", names)
	}
}
