package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// testOwnerKeys: an owner has one key; a second create returns the first
// (the replica that lost the race uses the winner's); a rewrap changes
// the row only while it is as read; the counts are by KEK.
func testOwnerKeys(t *testing.T, s store.Store) {
	at := time.Unix(0, 1_700_000_000_000_000_000)
	first := store.OwnerKey{Owner: "alice", KeyID: "k1", Wrapped: []byte("wrapped-1"), KEKFingerprint: "kek-a", Created: at}
	got, err := s.CreateOwnerKey(ctx(t), first)
	if err != nil || got.KeyID != "k1" || !bytes.Equal(got.Wrapped, first.Wrapped) || got.KEKFingerprint != "kek-a" || !got.Created.Equal(at) {
		t.Fatalf("CreateOwnerKey: %+v, %v", got, err)
	}
	second := first
	second.KeyID, second.Wrapped = "k2", []byte("wrapped-2")
	if got, err := s.CreateOwnerKey(ctx(t), second); err != nil || got.KeyID != "k1" {
		t.Fatalf("a second CreateOwnerKey for the owner: %+v, %v; want the first key", got, err)
	}
	if _, err := s.GetOwnerKey(ctx(t), "bob"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetOwnerKey of an owner without one: %v", err)
	}
	bob := store.OwnerKey{Owner: "bob", KeyID: "k3", Wrapped: []byte("wrapped-3"), KEKFingerprint: "kek-b", Created: at}
	if _, err := s.CreateOwnerKey(ctx(t), bob); err != nil {
		t.Fatal(err)
	}
	rows, err := s.OwnerKeysNotUnder(ctx(t), "kek-b", "", 10)
	if err != nil || len(rows) != 1 || rows[0].Owner != "alice" {
		t.Fatalf("OwnerKeysNotUnder kek-b: %+v, %v; want alice's", rows, err)
	}
	if rows, err := s.OwnerKeysNotUnder(ctx(t), "kek-c", "alice", 10); err != nil || len(rows) != 1 || rows[0].Owner != "bob" {
		t.Fatalf("OwnerKeysNotUnder kek-c after alice: %+v, %v; want bob's", rows, err)
	}
	// Keys either side of the KEK named, and none under it (the key
	// worker reads two ranges of owner_keys_by_kek, issue 52).
	if rows, err := s.OwnerKeysNotUnder(ctx(t), "kek-a", "", 10); err != nil || len(rows) != 1 || rows[0].Owner != "bob" {
		t.Fatalf("OwnerKeysNotUnder kek-a: %+v, %v; want bob's", rows, err)
	}
	if keks, err := s.OwnerKeyKEKs(ctx(t)); err != nil || !slices.Equal(keks, []string{"kek-a", "kek-b"}) {
		t.Fatalf("OwnerKeyKEKs: %v, %v; want [kek-a kek-b]", keks, err)
	}
	for except, want := range map[string]map[string]int64{
		"":      {"kek-a": 1, "kek-b": 1},
		"kek-a": {"kek-b": 1},
		"kek-b": {"kek-a": 1},
		"kek-c": {"kek-a": 1, "kek-b": 1},
	} {
		counts, err := s.KeyCounts(ctx(t), except)
		if err != nil || !maps.Equal(counts.OwnerKeys, want) {
			t.Fatalf("KeyCounts except %q: %v, %v; want %v", except, counts.OwnerKeys, err, want)
		}
	}
	stale := got
	if err := s.RewrapOwnerKey(ctx(t), got, []byte("rewrapped"), "kek-b", at.Add(time.Hour)); err != nil {
		t.Fatalf("RewrapOwnerKey: %v", err)
	}
	if err := s.RewrapOwnerKey(ctx(t), stale, []byte("again"), "kek-c", at); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RewrapOwnerKey from a row already rewrapped: %v, want ErrNotFound", err)
	}
	after, err := s.GetOwnerKey(ctx(t), "alice")
	if err != nil || string(after.Wrapped) != "rewrapped" || after.KEKFingerprint != "kek-b" || after.KeyID != "k1" || !after.Rewrapped.Equal(at.Add(time.Hour)) {
		t.Fatalf("after the rewrap: %+v, %v", after, err)
	}
	counts, err := s.KeyCounts(ctx(t), "")
	if err != nil || counts.OwnerKeys["kek-b"] != 2 || len(counts.OwnerKeys) != 1 {
		t.Fatalf("KeyCounts: %+v, %v; want 2 owner keys under kek-b", counts, err)
	}
}

// testLegacyBackupKeys: rows whose data keys a KEK wraps directly are
// listed in (owner, id) order and resealed once, conditionally.
func testLegacyBackupKeys(t *testing.T, s store.Store) {
	var ids []string
	for i, owner := range []string{"bob", "alice", "alice"} {
		b := writingBackup(owner, "0000000000000001000000000000000"+string(rune('a'+i)), "")
		b.KEKFingerprint = "kek-a"
		ids = append(ids, b.ID)
		if err := s.CreateBackup(ctx(t), b); err != nil {
			t.Fatal(err)
		}
	}
	sealed := writingBackup("carol", "00000000000000010000000000000000", "")
	sealed.OwnerKeyID = "k9"
	if err := s.CreateBackup(ctx(t), sealed); err != nil {
		t.Fatal(err)
	}
	page, err := s.LegacyBackups(ctx(t), "", "", 2)
	if err != nil || len(page) != 2 || page[0].Owner != "alice" || page[0].ID != ids[1] || page[1].ID != ids[2] {
		t.Fatalf("LegacyBackups first page: %v; want alice's two in id order", err)
	}
	page, err = s.LegacyBackups(ctx(t), page[1].Owner, page[1].ID, 2)
	if err != nil || len(page) != 1 || page[0].Owner != "bob" {
		t.Fatalf("LegacyBackups second page: %d rows, %v; want bob's", len(page), err)
	}
	counts, err := s.KeyCounts(ctx(t), "")
	if err != nil || counts.LegacyBackups["kek-a"] != 3 {
		t.Fatalf("KeyCounts: %+v, %v; want 3 legacy rows under kek-a", counts, err)
	}
	old := page[0].WrappedKey
	if err := s.RewrapBackupKey(ctx(t), "bob", ids[0], old, []byte("sealed"), "k7"); err != nil {
		t.Fatalf("RewrapBackupKey: %v", err)
	}
	if err := s.RewrapBackupKey(ctx(t), "bob", ids[0], old, []byte("twice"), "k8"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RewrapBackupKey of a row already resealed: %v, want ErrNotFound", err)
	}
	b, err := s.GetBackup(ctx(t), "bob", ids[0])
	if err != nil || b.OwnerKeyID != "k7" || string(b.WrappedKey) != "sealed" || b.KEKFingerprint != "" {
		t.Fatalf("the resealed row: owner key %q, key %q, kek %q, %v", b.OwnerKeyID, b.WrappedKey, b.KEKFingerprint, err)
	}
	if page, err := s.LegacyBackups(ctx(t), "alice", ids[2], 10); err != nil || len(page) != 0 {
		t.Fatalf("LegacyBackups after the reseal: %d rows, %v", len(page), err)
	}
}

// testHoldsKeepBackups: a hold in force on a backup or its owner makes
// MarkBackupDeleting ErrHeld (and changes nothing); a lapsed or released
// hold, or another owner's, does not.
func testHoldsKeepBackups(t *testing.T, s store.Store) {
	now := time.Now()
	b := writingBackup("alice", "00000000000000010000000000000000", "")
	other := writingBackup("bob", "00000000000000010000000000000000", "")
	other.JobID = "jbob"
	for _, x := range []store.Backup{b, other} {
		completeAsJob(t, s, func() store.Backup {
			if err := s.CreateBackup(ctx(t), x); err != nil {
				t.Fatal(err)
			}
			return x
		}(), store.BackupSummary{At: now, ChangeSeq: 1})
	}
	mustHold := func(h store.Hold) {
		t.Helper()
		if err := s.SetHold(ctx(t), h); err != nil {
			t.Fatalf("SetHold: %v", err)
		}
	}
	refused := func(what string) {
		t.Helper()
		if _, err := s.MarkBackupDeleting(ctx(t), "alice", b.ID); !errors.Is(err, store.ErrHeld) {
			t.Fatalf("MarkBackupDeleting %s: %v, want ErrHeld", what, err)
		}
		if got, _ := s.GetBackup(ctx(t), "alice", b.ID); got.State != store.BackupComplete {
			t.Fatalf("a refused delete %s left the backup %s", what, got.State)
		}
	}
	// Two holds on one backup, each its own record: releasing one leaves
	// the other holding (issue 46, finding 9).
	mustHold(store.Hold{Owner: "alice", ID: "h1", Backup: b.ID, Reason: "case 1", Principal: "legal", Created: now})
	mustHold(store.Hold{Owner: "alice", ID: "h1b", Backup: b.ID, Reason: "case 1b", Principal: "regulator", Created: now.Add(time.Second)})
	refused("under two backup holds")
	mustHold(store.Hold{Owner: "bob", ID: "h2", Reason: "case 2", Principal: "legal", Created: now})
	if err := s.ReleaseHold(ctx(t), "alice", "h1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseHold(ctx(t), "alice", "h1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("releasing a hold twice: %v, want ErrNotFound", err)
	}
	if err := s.ReleaseHold(ctx(t), "bob", "h1b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("releasing alice's hold as bob's: %v, want ErrNotFound", err)
	}
	refused("under the backup hold left")
	if err := s.ReleaseHold(ctx(t), "alice", "h1b"); err != nil {
		t.Fatal(err)
	}
	mustHold(store.Hold{Owner: "alice", ID: "h3", Reason: "case 3", Principal: "legal", Created: now, Until: now.Add(time.Hour)})
	refused("under an owner hold")
	holds, err := s.ListHolds(ctx(t), "alice")
	if err != nil || len(holds) != 1 || holds[0].ID != "h3" || holds[0].Reason != "case 3" || holds[0].Principal != "legal" || holds[0].Backup != "" ||
		!holds[0].Until.Equal(time.Unix(0, now.Add(time.Hour).UnixNano())) {
		t.Fatalf("ListHolds: %+v, %v", holds, err)
	}
	// The same id changes the hold (its creation stays): lapsed now, it
	// keeps nothing.
	mustHold(store.Hold{Owner: "alice", ID: "h3", Reason: "case 3", Principal: "legal", Created: now.Add(time.Hour), Until: now.Add(-time.Second)})
	if holds, _ := s.ListHolds(ctx(t), "alice"); len(holds) != 1 || !holds[0].Created.Equal(time.Unix(0, now.UnixNano())) {
		t.Fatalf("a changed hold: %+v; want one, created as first stored", holds)
	}
	if _, err := s.MarkBackupDeleting(ctx(t), "alice", b.ID); err != nil {
		t.Fatalf("MarkBackupDeleting under a lapsed hold (bob's in force): %v", err)
	}
	if _, err := s.MarkBackupDeleting(ctx(t), "bob", other.ID); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("bob's backup under bob's hold: %v, want ErrHeld", err)
	}
}

// testEraseOwnerRows: destroying the owner key removes its row and
// blanks every wrapped data key of the owner; EraseOwnerRows then leaves
// no row of the owner in any table but the kept job, and touches nothing
// of another owner; the dry run's counts are what it deleted.
func testEraseOwnerRows(t *testing.T, s store.Store) {
	now := time.Now()
	for _, owner := range []string{"alice", "bob"} {
		if _, err := s.PutGroup(ctx(t), owner, FullGroup("g")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendMessages(ctx(t), owner, Messages("m", GroupID("g"), 3, 1), store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MergeConsent(ctx(t), owner, []*cs.ConsentSave{Consent("e", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 1)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateOwnerKey(ctx(t), store.OwnerKey{Owner: owner, KeyID: owner + "-key", Wrapped: []byte("w"), KEKFingerprint: "kek", Created: now}); err != nil {
			t.Fatal(err)
		}
		b := writingBackup(owner, "00000000000000010000000000000000", "nightly")
		b.OwnerKeyID = owner + "-key"
		if err := s.CreateBackup(ctx(t), b); err != nil {
			t.Fatal(err)
		}
		legacy := writingBackup(owner, "00000000000000020000000000000000", "nightly")
		legacy.JobID = "other-" + owner
		if err := s.CreateBackup(ctx(t), legacy); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ClaimScheduleTick(ctx(t), owner, "nightly", now.Truncate(time.Hour), "replica"); err != nil {
			t.Fatal(err)
		}
		if err := s.SetHold(ctx(t), store.Hold{Owner: owner, ID: "lapsed", Backup: legacy.ID, Reason: "lapsed", Principal: "legal", Created: now, Until: now.Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, newJob("export-"+owner, store.JobExport, owner, now.Add(time.Minute)))
		if err := s.FinishJob(ctx(t), "export-"+owner, 1, store.JobEnd{State: store.JobSucceeded, At: now}); err != nil {
			t.Fatal(err)
		}
		// An earlier erasure of the name that failed: its record stays
		// through the next (issue 46, finding 6).
		mustCreate(t, s, newJob("erase0-"+owner, store.JobErase, owner, now.Add(time.Minute)))
		if err := s.FinishJob(ctx(t), "erase0-"+owner, 1, store.JobEnd{State: store.JobFailed, At: now}); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, newJob("erase-"+owner, store.JobErase, owner, now.Add(time.Minute)))
	}
	before, err := s.CountOwnerRows(ctx(t), "alice")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"messages": 3, "groups": 1, "consent": 1, "owner_changes": 1, "schedule_ticks": 1, "holds": 1, "backups": 2, "owner_keys": 1, "jobs": 3}
	for table, n := range want {
		if before[table] != n {
			t.Errorf("CountOwnerRows %s: %d, want %d", table, before[table], n)
		}
	}
	if err := s.DestroyOwnerKey(ctx(t), "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetOwnerKey(ctx(t), "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the owner key after DestroyOwnerKey: %v", err)
	}
	for _, id := range []string{"00000000000000010000000000000000", "00000000000000020000000000000000"} {
		if b, err := s.GetBackup(ctx(t), "alice", id); err != nil || len(b.WrappedKey) != 0 {
			t.Fatalf("backup %s after DestroyOwnerKey: wrapped key %x, %v; want none", id, b.WrappedKey, err)
		}
	}
	if err := s.DestroyOwnerKey(ctx(t), "alice"); err != nil {
		t.Fatalf("DestroyOwnerKey again: %v", err)
	}
	deleted, err := s.EraseOwnerRows(ctx(t), "alice", "erase-alice")
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.CountOwnerRows(ctx(t), "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range store.OwnerRowTables {
		left := int64(0)
		if table == "jobs" {
			left = 2 // the erasure's own record, and the earlier one's
		}
		if after[table] != left {
			t.Errorf("%s: %d rows of the erased owner left, want %d", table, after[table], left)
		}
		wantDeleted := before[table] - left
		if table == "owner_keys" {
			wantDeleted = 0 // destroyed first
		}
		if deleted[table] != wantDeleted {
			t.Errorf("%s: EraseOwnerRows reports %d deleted, want %d", table, deleted[table], wantDeleted)
		}
	}
	for _, id := range []string{"erase-alice", "erase0-alice"} {
		if j, err := s.GetJob(ctx(t), id); err != nil || j.Owner != "alice" {
			t.Fatalf("the erasure record %s: %v", id, err)
		}
	}
	again, err := s.EraseOwnerRows(ctx(t), "alice", "erase-alice")
	if err != nil {
		t.Fatal(err)
	}
	for table, n := range again {
		if n != 0 {
			t.Errorf("EraseOwnerRows again deleted %d from %s", n, table)
		}
	}
	bob, err := s.CountOwnerRows(ctx(t), "bob")
	if err != nil {
		t.Fatal(err)
	}
	for table, n := range want {
		if bob[table] != n {
			t.Errorf("another owner's %s: %d rows, want %d", table, bob[table], n)
		}
	}
	if k, err := s.GetOwnerKey(ctx(t), "bob"); err != nil || k.KeyID != "bob-key" {
		t.Fatalf("another owner's key: %v", err)
	}
}

// testFinishedErasuresKept: an ended erasure's job is its audit record,
// which the deletion of old finished jobs leaves.
func testFinishedErasuresKept(t *testing.T, s store.Store) {
	for _, j := range []store.Job{newJob("e1", store.JobErase, "alice", time.Now()), newJob("x1", store.JobExport, "alice", time.Now())} {
		j.Attempt = 1
		mustCreate(t, s, j)
		if err := s.FinishJob(ctx(t), j.ID, j.Attempt, store.JobEnd{State: store.JobSucceeded, At: time.Now().Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.DeleteFinishedJobs(ctx(t), time.Now(), 100); err != nil || n != 1 {
		t.Fatalf("DeleteFinishedJobs: %d, %v; want the export's only", n, err)
	}
	if _, err := s.GetJob(ctx(t), "e1"); err != nil {
		t.Fatalf("the erasure's record: %v", err)
	}
}

// CheckErasureCovers fails unless the tables the schema says have an
// owner column are exactly store.OwnerRowTables.
func CheckErasureCovers(t *testing.T, withOwner []string) {
	t.Helper()
	if len(withOwner) < 5 {
		t.Fatalf("the schema lists %d tables with an owner column: the query saw too little", len(withOwner))
	}
	for _, table := range withOwner {
		if !slices.Contains(store.OwnerRowTables, table) && !slices.Contains(store.ErasureRecordTables, table) {
			t.Errorf("table %s holds owner rows, and erasure (store.OwnerRowTables) does not delete from it", table)
		}
	}
	for _, table := range store.OwnerRowTables {
		if !slices.Contains(withOwner, table) {
			t.Errorf("store.OwnerRowTables names %s, which has no owner column", table)
		}
	}
}

// testErasureFence: an erasure and the jobs it would race never run at
// once (issue 46, findings 2 and 3). An erasure is refused while an
// export or import of its owner, or an import from its backups into
// another owner, runs; while it runs, no such job starts; a dry run is
// not a fence. Started at the same instant, one of an export and an
// erasure is stored, never both.
func testErasureFence(t *testing.T, s store.Store) {
	now := time.Now()
	lease := now.Add(time.Minute)
	finish := func(id string) {
		t.Helper()
		if err := s.FinishJob(ctx(t), id, 1, store.JobEnd{State: store.JobSucceeded, At: now}); err != nil {
			t.Fatal(err)
		}
	}
	// An erasure is stored whatever runs, and lists what it must stop:
	// the owner's export and an import from its backups into bob.
	mustCreate(t, s, newJob("export-a", store.JobExport, "alice", lease))
	migrate := newJob("import-b", store.JobImport, "bob", lease)
	migrate.SourceOwner = "alice"
	mustCreate(t, s, migrate)
	if j, err := s.GetJob(ctx(t), "import-b"); err != nil || j.SourceOwner != "alice" {
		t.Fatalf("the import's source owner reads back %q, %v", j.SourceOwner, err)
	}
	mustCreate(t, s, newJob("export-bob-own", store.JobExport, "bob", lease))
	if ids, err := s.RunningJobsFor(ctx(t), "alice"); err != nil || !slices.Equal(ids, []string{"export-a", "import-b"}) {
		t.Fatalf("RunningJobsFor alice: %v, %v; want her export and the import from her backups", ids, err)
	}
	finish("export-a")
	finish("import-b")
	finish("export-bob-own")
	mustCreate(t, s, newJob("erase-a", store.JobErase, "alice", lease))
	if id, err := s.RunningErasure(ctx(t), "alice"); err != nil || id != "erase-a" {
		t.Fatalf("RunningErasure: %q, %v", id, err)
	}
	fromAlice := newJob("import-c", store.JobImport, "carol", lease)
	fromAlice.SourceOwner = "alice"
	intoAlice := newJob("import-a", store.JobImport, "alice", lease)
	intoAlice.SourceOwner = "carol"
	for _, j := range []store.Job{newJob("export-a2", store.JobExport, "alice", lease), newJob("import-a2", store.JobImport, "alice", lease), fromAlice, intoAlice} {
		if err := s.CreateJob(ctx(t), j); !errors.Is(err, store.ErrOwnerErasing) {
			t.Errorf("%s (owner %s, source %q) while alice is erased: %v, want ErrOwnerErasing", j.ID, j.Owner, j.SourceOwner, err)
		}
	}
	mustCreate(t, s, newJob("dry-a", store.JobEraseDryRun, "alice", lease))
	mustCreate(t, s, newJob("export-bob", store.JobExport, "bob", lease))
	finish("erase-a")
	if id, err := s.RunningErasure(ctx(t), "alice"); err != nil || id != "" {
		t.Fatalf("RunningErasure after it ended: %q, %v", id, err)
	}
	mustCreate(t, s, newJob("export-a3", store.JobExport, "alice", lease))
	finish("export-a3")

	// The race: imports from dave's backups (each into an owner of its
	// own, left running) started in a loop while dave's erasure is
	// stored. Every one stored is in what the erasure lists right after
	// it is stored, so the erasure stops it; every one started after the
	// erasure was stored is refused ErrOwnerErasing.
	for round := range 20 {
		source := fmt.Sprintf("dave-%d", round)
		var wg sync.WaitGroup
		var erased atomic.Bool
		stop := make(chan struct{})
		var stored []string
		var unexpected []error
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				j := newJob(fmt.Sprintf("race-import-%d-%d", round, n), store.JobImport, fmt.Sprintf("erin-%d-%d", round, n), lease)
				j.SourceOwner = source
				after := erased.Load()
				err := s.CreateJob(ctx(t), j)
				switch {
				case err == nil && after:
					unexpected = append(unexpected, fmt.Errorf("import %s started after the erasure was stored", j.ID))
				case err == nil:
					stored = append(stored, j.ID)
				case !errors.Is(err, store.ErrOwnerErasing):
					unexpected = append(unexpected, err)
				}
			}
		})
		time.Sleep(time.Duration(round%4) * time.Millisecond)
		erase := newJob(fmt.Sprintf("race-erase-%d", round), store.JobErase, source, lease)
		mustCreate(t, s, erase)
		erased.Store(true)
		listed, err := s.RunningJobsFor(ctx(t), source)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		close(stop)
		wg.Wait()
		if len(unexpected) > 0 {
			t.Fatalf("round %d: %v", round, unexpected)
		}
		for _, id := range stored {
			if !slices.Contains(listed, id) {
				t.Fatalf("round %d: import %s was stored and is not in what the erasure stops (%v)", round, id, listed)
			}
			finish(id)
		}
		finish(erase.ID)
	}
}

// testErasureUnderWriters: an erasure while the owner's devices keep
// appending succeeds, and each append either lands before it (and is
// erased) or finds its group gone (issue 46, finding 10: a foreign key
// broke between the messages' and the groups' deletes, INTERNAL).
func testErasureUnderWriters(t *testing.T, s store.Store) {
	for round := range 3 {
		if _, err := s.PutGroup(ctx(t), "alice", FullGroup("g")); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var unexpected []error
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					_, err := s.AppendMessages(ctx(t), "alice", Messages(fmt.Sprintf("r%d-w%d-%d-", round, w, n), GroupID("g"), 2, int64(n)), store.AppendOptions{})
					if err != nil && !errors.Is(err, store.ErrNotFound) {
						mu.Lock()
						unexpected = append(unexpected, err)
						mu.Unlock()
						return
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		_, err := s.EraseOwnerRows(ctx(t), "alice", "")
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: the erasure under writers: %v", round, err)
		}
		for _, e := range unexpected {
			t.Errorf("round %d: an append racing the erasure: %v, want success or ErrNotFound", round, e)
		}
		left, err := s.CountOwnerRows(ctx(t), "alice")
		if err != nil {
			t.Fatal(err)
		}
		if left["messages"] != 0 || left["groups"] != 0 {
			t.Errorf("round %d: %d messages and %d groups left after the erasure", round, left["messages"], left["groups"])
		}
	}
}

// testKEKRetirements: erasures note the KEKs they need gone; a retired
// KEK wraps nothing new (CreateOwnerKey and RewrapOwnerKey refuse it);
// every row stored under it before the retirement is visible once it is
// retired, so a count of 0 after it stays 0 (issue 46, finding 1).
func testKEKRetirements(t *testing.T, s store.Store) {
	at := time.Unix(0, 1_700_000_000_000_000_000)
	for _, n := range []struct {
		fp, job string
		at      time.Time
	}{{"kek-x", "j1", at.Add(time.Minute)}, {"kek-x", "j1", at.Add(time.Hour)}, {"kek-x", "j2", at}, {"kek-y", "j2", at}} {
		if err := s.NoteErasure(ctx(t), n.fp, n.job, n.at); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.ListKEKRetirements(ctx(t))
	if err != nil || len(list) != 2 || list[0].Fingerprint != "kek-x" || !slices.Equal(list[0].Jobs, []string{"j1", "j2"}) ||
		!list[0].Due.Equal(at) || !list[0].Retired.IsZero() || list[1].Fingerprint != "kek-y" {
		t.Fatalf("ListKEKRetirements: %+v, %v", list, err)
	}
	if _, err := s.CreateOwnerKey(ctx(t), store.OwnerKey{Owner: "before", KeyID: "k0", Wrapped: []byte("w"), KEKFingerprint: "kek-x", Created: at}); err != nil {
		t.Fatalf("an owner key under a KEK due to retire, not retired yet: %v", err)
	}
	if err := s.RetireKEK(ctx(t), "kek-x", at.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.RetireKEK(ctx(t), "kek-x", at.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateOwnerKey(ctx(t), store.OwnerKey{Owner: "after", KeyID: "k1", Wrapped: []byte("w"), KEKFingerprint: "kek-x", Created: at}); !errors.Is(err, store.ErrKEKRetired) {
		t.Fatalf("CreateOwnerKey under a retired KEK: %v, want ErrKEKRetired", err)
	}
	if _, err := s.GetOwnerKey(ctx(t), "after"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused owner key was stored: %v", err)
	}
	other, err := s.CreateOwnerKey(ctx(t), store.OwnerKey{Owner: "other", KeyID: "k2", Wrapped: []byte("w2"), KEKFingerprint: "kek-z", Created: at})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RewrapOwnerKey(ctx(t), other, []byte("w3"), "kek-x", at); !errors.Is(err, store.ErrKEKRetired) {
		t.Fatalf("RewrapOwnerKey onto a retired KEK: %v, want ErrKEKRetired", err)
	}
	if err := s.NoteErasure(ctx(t), "kek-x", "j3", at.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.KEKDestroyed(ctx(t), "kek-y", at.Add(5*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.KEKDestroyed(ctx(t), "kek-x", at.Add(5*time.Hour)); err != nil {
		t.Fatal(err)
	}
	keks, err := s.ErasureKEKs(ctx(t), "j3")
	if err != nil || len(keks) != 1 || !keks[0].Retired.Equal(at.Add(2*time.Hour)) || !keks[0].Destroyed.Equal(at.Add(5*time.Hour)) {
		t.Fatalf("ErasureKEKs of an erasure noted after the retirement: %+v, %v; want it retired at the first RetireKEK and destroyed", keks, err)
	}
	keks, err = s.ErasureKEKs(ctx(t), "j2")
	if err != nil || len(keks) != 2 || keks[0].Destroyed.IsZero() || !keks[1].Destroyed.IsZero() {
		t.Fatalf("ErasureKEKs j2: %+v, %v; want kek-x destroyed, kek-y (never retired) not", keks, err)
	}

	// The fence: writers creating owner keys under a KEK while it is
	// retired. Every key stored is counted right after the retirement,
	// and none is stored after.
	const writers = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	stored := 0
	started := make(chan struct{}, writers)
	for w := range writers {
		wg.Go(func() {
			var once sync.Once
			defer once.Do(func() { started <- struct{}{} })
			for i := 0; ; i++ {
				_, err := s.CreateOwnerKey(ctx(t), store.OwnerKey{Owner: fmt.Sprintf("racer-%d-%d", w, i), KeyID: "k", Wrapped: []byte("w"), KEKFingerprint: "kek-race", Created: at})
				if errors.Is(err, store.ErrKEKRetired) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				stored++
				mu.Unlock()
				if i == 2 {
					once.Do(func() { started <- struct{}{} })
				}
			}
		})
	}
	for range writers {
		<-started
	}
	if err := s.RetireKEK(ctx(t), "kek-race", at); err != nil {
		t.Fatal(err)
	}
	atRetirement, err := s.KeyCounts(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	final, err := s.KeyCounts(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if atRetirement.OwnerKeys["kek-race"] != final.OwnerKeys["kek-race"] || int64(stored) != final.OwnerKeys["kek-race"] {
		t.Fatalf("owner keys under the KEK: %d right after its retirement, %d in the end, %d stored; want all equal",
			atRetirement.OwnerKeys["kek-race"], final.OwnerKeys["kek-race"], stored)
	}
}

// testErasedOwners: an erased name stays erased until re-enabled, once;
// a later erasure erases it again; a name never erased is not found.
func testErasedOwners(t *testing.T, s store.Store) {
	at := time.Unix(0, 1_700_000_000_000_000_000)
	if _, err := s.OwnerErased(ctx(t), "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("OwnerErased of a name never erased: %v, want ErrNotFound", err)
	}
	if _, err := s.ReenableOwner(ctx(t), "alice", "ops", "why", at); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReenableOwner of a name never erased: %v, want ErrNotFound", err)
	}
	if err := s.MarkOwnerErased(ctx(t), "alice", "job-1", at); err != nil {
		t.Fatal(err)
	}
	// The same erasure resumed keeps its record.
	if err := s.MarkOwnerErased(ctx(t), "alice", "job-1", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	e, err := s.OwnerErased(ctx(t), "alice")
	if err != nil || e.Job != "job-1" || !e.Erased.Equal(at) || !e.Blocked() {
		t.Fatalf("OwnerErased: %+v, %v", e, err)
	}
	e, err = s.ReenableOwner(ctx(t), "alice", "jwt:dpo", "the number was reassigned", at.Add(2*time.Hour))
	if err != nil || e.Blocked() || e.ReenabledBy != "jwt:dpo" || e.Reason != "the number was reassigned" || !e.Reenabled.Equal(at.Add(2*time.Hour)) {
		t.Fatalf("ReenableOwner: %+v, %v", e, err)
	}
	if e, err = s.ReenableOwner(ctx(t), "alice", "jwt:other", "again", at.Add(3*time.Hour)); err != nil || e.ReenabledBy != "jwt:dpo" {
		t.Fatalf("a second ReenableOwner: %+v, %v; want the first kept", e, err)
	}
	if err := s.MarkOwnerErased(ctx(t), "alice", "job-2", at.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if e, err = s.OwnerErased(ctx(t), "alice"); err != nil || e.Job != "job-2" || !e.Blocked() || e.ReenabledBy != "" {
		t.Fatalf("after a second erasure: %+v, %v; want erased again", e, err)
	}
	if _, err := s.OwnerErased(ctx(t), "bob"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another name: %v", err)
	}
}
