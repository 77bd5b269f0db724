package jobs

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	dsb "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// exportDone runs an export job to its end and returns its result.
func exportDone(t *testing.T, h *harness, req ExportRequest) *pv.ExportJobResult {
	t.Helper()
	j, err := h.m.StartExport(t.Context(), "tester", req)
	if err != nil {
		t.Fatalf("start export since %q: %v", req.Since, err)
	}
	j = waitDone(t, h.m, j.ID)
	if j.State != store.JobSucceeded {
		t.Fatalf("export since %q ended %s: %d %s", req.Since, j.State, j.ErrorCode, j.ErrorMessage)
	}
	result := &pv.ExportJobResult{}
	if err := proto.Unmarshal(j.Result, result); err != nil {
		t.Fatal(err)
	}
	return result
}

func importDone(t *testing.T, h *harness, owner, source, id string) {
	t.Helper()
	j, err := h.m.StartImport(t.Context(), "tester", ImportRequest{Owner: owner, SourceOwner: source, Backup: id})
	if err != nil {
		t.Fatal(err)
	}
	if j = waitDone(t, h.m, j.ID); j.State != store.JobSucceeded {
		t.Fatalf("import of %s ended %s: %d %s", id, j.State, j.ErrorCode, j.ErrorMessage)
	}
}

// TestChainRestoresTheOwner: a full backup and three increments, each
// since the one before, restored oldest first into an empty owner, give
// that owner the source owner's state record by record; among the changes
// a message stored late with a send time older than every other, which an
// increment by sent_at would lose. Each increment holds only its changes.
func TestChainRestoresTheOwner(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st)
			ctx := t.Context()
			src, dst := storetest.Owner("chain-src"), storetest.Owner("chain-dst")
			fill(t, st, src, 20)
			full := exportDone(t, h, exportReq(src, "full"))

			// Increment 1: new messages in one group.
			if _, err := st.AppendMessages(ctx, src, storetest.Messages("late-day", storetest.GroupID("g-one"), 5, 5000), store.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			inc1 := exportDone(t, h, ExportRequest{Owner: src, Label: "inc1", Since: full.GetBackup()})

			// Increment 2: a message sent before everything else but stored
			// only now, and a consent record that changed.
			old := storetest.Message("sent-long-ago", storetest.GroupID("g-two"), 1)
			if _, err := st.AppendMessages(ctx, src, []*mb.GroupMessageSave{old}, store.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.MergeConsent(ctx, src, []*cs.ConsentSave{storetest.Consent("someone", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 9)}); err != nil {
				t.Fatal(err)
			}
			inc2 := exportDone(t, h, ExportRequest{Owner: src, Label: "inc2", Since: inc1.GetBackup()})

			// Increment 3: a new group with its history.
			if _, err := st.PutGroup(ctx, src, storetest.FullGroup("g-three")); err != nil {
				t.Fatal(err)
			}
			if _, err := st.AppendMessages(ctx, src, storetest.Messages("three", storetest.GroupID("g-three"), 3, 7000), store.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			inc3 := exportDone(t, h, ExportRequest{Owner: src, Label: "inc3", Since: inc2.GetBackup()})

			for _, c := range []struct {
				name                      string
				r                         *pv.ExportJobResult
				groups, messages, consent uint64
			}{
				{"full", full, 2, 40, 1}, {"inc1", inc1, 1, 5, 0}, {"inc2", inc2, 1, 1, 1}, {"inc3", inc3, 1, 3, 0},
			} {
				s := c.r.GetSummary()
				if s.GetGroups() != c.groups || s.GetMessages() != c.messages || s.GetConsentRecords() != c.consent {
					t.Errorf("%s holds %d groups, %d messages, %d consent; want %d, %d, %d", c.name,
						s.GetGroups(), s.GetMessages(), s.GetConsentRecords(), c.groups, c.messages, c.consent)
				}
			}
			for base, inc := range map[string]string{full.GetBackup(): inc1.GetBackup(), inc1.GetBackup(): inc2.GetBackup(), inc2.GetBackup(): inc3.GetBackup()} {
				b, err := st.GetBackup(ctx, src, inc)
				if err != nil || b.Base != base {
					t.Errorf("backup %s names base %q (%v), want %s", inc, b.Base, err, base)
				}
			}

			for _, r := range []*pv.ExportJobResult{full, inc1, inc2, inc3} {
				importDone(t, h, dst, src, r.GetBackup())
			}
			g1, m1, c1 := snapshot(t, st, src)
			g2, m2, c2 := snapshot(t, st, dst)
			equalRecords(t, "groups", g2, g1)
			equalRecords(t, "messages", m2, m1)
			equalRecords(t, "consent", c2, c1)
			if len(m2) != 49 {
				t.Errorf("the chain restored %d messages, want 49", len(m2))
			}

			// A base an increment needs stays until the increment goes.
			err := h.m.Catalog.DeleteBackup(ctx, "tester", src, inc2.GetBackup())
			if !errors.Is(err, ErrBaseNeeded) || fault.Of(err) != fault.FailedPrecondition {
				t.Errorf("delete a base: %v, want ErrBaseNeeded", err)
			}
			if _, err := st.GetBackup(ctx, src, inc2.GetBackup()); err != nil {
				t.Errorf("the refused delete removed the base: %v", err)
			}
			if err := h.m.Catalog.DeleteBackup(ctx, "tester", src, inc3.GetBackup()); err != nil {
				t.Errorf("delete the newest increment: %v", err)
			}
			if err := h.m.Catalog.DeleteBackup(ctx, "tester", src, inc2.GetBackup()); err != nil {
				t.Errorf("delete a base no increment needs any more: %v", err)
			}
		})
	}
}

func equalRecords[T proto.Message](t *testing.T, what string, got, want []T) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d restored, the source has %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("%s %d: restored %v\nsource %v", what, i, got[i], want[i])
		}
	}
}

// TestIncrementRefusals: since_backup names one of the owner's complete
// backups with a known change sequence, and the increment keeps its
// options; each refusal says which and starts nothing.
func TestIncrementRefusals(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	ctx := t.Context()
	alice, bob := storetest.Owner("inc-alice"), storetest.Owner("inc-bob")
	fill(t, st, alice, 2)
	fill(t, st, bob, 2)
	alicesFull := exportDone(t, h, exportReq(alice, "full"))
	// A backup written before changes were tracked reads back -1.
	legacy := store.Backup{Owner: alice, ID: NewID(time.Now()), State: store.BackupWriting, Bucket: "local",
		ObjectKey: ownerDir("", alice) + "legacy" + ArchiveSuffix, WrappedKey: []byte{1}, Created: time.Now()}
	if err := st.CreateBackup(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if err := st.CompleteBackup(ctx, alice, legacy.ID, store.Fence{}, store.BackupSummary{SHA256: make([]byte, 32), At: time.Now(), ChangeSeq: -1}); err != nil {
		t.Fatal(err)
	}
	messagesOnly := &dsb.ArchiveOptions{Elements: []dsb.BackupElementSelection{dsb.BackupElementSelection_BACKUP_ELEMENT_SELECTION_MESSAGES}}
	for _, c := range []struct {
		name string
		req  ExportRequest
		kind fault.Kind
		is   error
	}{
		{"another owner's backup", ExportRequest{Owner: bob, Since: alicesFull.GetBackup()}, fault.NotFound, ErrBackupNotFound},
		{"a missing backup", ExportRequest{Owner: alice, Since: NewID(time.Now())}, fault.NotFound, ErrBackupNotFound},
		{"a malformed id", ExportRequest{Owner: alice, Since: "../x"}, fault.Invalid, ErrInvalid},
		{"a backup without a change sequence", ExportRequest{Owner: alice, Since: legacy.ID}, fault.FailedPrecondition, ErrNoChangeSequence},
		{"other options than the base's", ExportRequest{Owner: alice, Since: alicesFull.GetBackup(), Options: messagesOnly}, fault.Invalid, ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, err := st.ListBackups(ctx, store.BackupQuery{Owner: c.req.Owner, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.m.StartExport(ctx, "tester", c.req)
			if !errors.Is(err, c.is) || fault.Of(err) != c.kind {
				t.Fatalf("got %v (%v), want %v", err, fault.Of(err), c.is)
			}
			after, err := st.ListBackups(ctx, store.BackupQuery{Owner: c.req.Owner, Limit: 100})
			if err != nil || len(after) != len(before) {
				t.Errorf("a refused start wrote a catalog row: %d, then %d (%v)", len(before), len(after), err)
			}
		})
	}
}

// TestScheduleBuildsChains: a schedule with full_every 3 writes a full
// backup, two increments each of the one before, then a full again; with
// keep 2 its retention keeps the newest two and the bases they need, so
// that whatever it keeps restores, and deletes the rest newest first.
func TestScheduleBuildsChains(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	owner := storetest.Owner("sched-chain")
	fill(t, st, owner, 3)
	policy, err := ParseSchedules([]byte(fmt.Sprintf(`
schedules:
  - name: nightly
    cron: "0 3 * * *"
    owners: [%q]
    bucket: local
    keep: 2
    full_every: 3
`, owner)))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScheduler(t.Context(), h.m, policy)
	if err != nil {
		t.Fatal(err)
	}
	s := policy.Schedules[0]
	day0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	var ids []string
	for day := range 5 {
		// Something new each day, so each increment has a change to hold.
		if _, err := st.AppendMessages(t.Context(), owner, storetest.Messages(fmt.Sprintf("day%d-", day), storetest.GroupID("g-one"), 2, int64(10_000+day*10)), store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		started := sc.Fire(t.Context(), s, day0.Add(time.Duration(day)*24*time.Hour))
		if len(started) != 1 {
			t.Fatalf("day %d started %d jobs", day, len(started))
		}
		j := waitDone(t, h.m, started[0])
		if j.State != store.JobSucceeded {
			t.Fatalf("day %d: %s %s", day, j.State, j.ErrorMessage)
		}
		md, err := Progress(j)
		if err != nil || md.GetBackup() == "" {
			t.Fatalf("day %d: progress %v, %v", day, md, err)
		}
		ids = append(ids, md.GetBackup())
		// Retention runs after the job: wait for it before the next firing.
		// Keep 2 and the bases they need: full; full+1; +2 on +1 on the
		// full; the new full and +2's whole chain; the new full and +1.
		want := []int{1, 2, 3, 4, 2}[day]
		var held int
		eventually.True(t, 10*time.Second, func() bool {
			l, err := st.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 10})
			held = len(l)
			return err == nil && held == want
		}, func() string { return fmt.Sprintf("day %d: retention left %d backups, want %d", day, held, want) })
	}
	wantBase := []string{"", ids[0], ids[1], "", ids[3]}
	rows, err := st.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].ID != ids[4] || rows[1].ID != ids[3] {
		t.Fatalf("after five firings the catalog holds %v, want the last full and its increment %v", rows, ids[3:])
	}
	if rows[0].Base != wantBase[4] || rows[1].Base != "" {
		t.Errorf("bases %q, %q; want %q, full", rows[0].Base, rows[1].Base, wantBase[4])
	}
	dst := storetest.Owner("sched-chain-dst")
	importDone(t, h, dst, owner, ids[3])
	importDone(t, h, dst, owner, ids[4])
	_, m1, _ := snapshot(t, st, owner)
	_, m2, _ := snapshot(t, st, dst)
	equalRecords(t, "messages", m2, m1)
}

// TestScheduleChainBases: the base nextBase picks for each place in a
// chain, and a full whenever the newest backup cannot be built on.
func TestScheduleChainBases(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	owner := storetest.Owner("bases")
	s := &Schedule{Name: "n", FullEvery: 3}
	add := func(id, base string, seq int64, problem string) {
		b := store.Backup{Owner: owner, ID: id, State: store.BackupWriting, Schedule: "n", Bucket: "local", ObjectKey: "k" + id,
			WrappedKey: []byte{1}, Created: time.Now(), Base: base}
		if err := st.CreateBackup(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		if err := st.CompleteBackup(t.Context(), owner, id, store.Fence{}, store.BackupSummary{SHA256: make([]byte, 32), At: time.Now(), ChangeSeq: seq}); err != nil {
			t.Fatal(err)
		}
		if problem != "" {
			if err := st.RecordVerification(t.Context(), owner, id, time.Now(), problem); err != nil {
				t.Fatal(err)
			}
		}
	}
	next := func() string {
		t.Helper()
		id, err := h.m.Catalog.nextBase(t.Context(), s, owner)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if got := next(); got != "" {
		t.Errorf("no backup yet: base %q, want a full", got)
	}
	add("01", "", 5, "")
	if got := next(); got != "01" {
		t.Errorf("after a full: base %q, want 01", got)
	}
	add("02", "01", 6, "")
	if got := next(); got != "02" {
		t.Errorf("after a full and an increment: base %q, want 02", got)
	}
	add("03", "02", 7, "")
	if got := next(); got != "" {
		t.Errorf("a chain of 3 with full_every 3: base %q, want a full", got)
	}
	add("04", "", 8, "the object is 3 bytes short")
	if got := next(); got != "" {
		t.Errorf("the newest failed verification: base %q, want a full", got)
	}
	add("05", "", -1, "")
	if got := next(); got != "" {
		t.Errorf("the newest has no change sequence: base %q, want a full", got)
	}
	s.FullEvery = 1
	add("06", "", 9, "")
	if got := next(); got != "" {
		t.Errorf("full_every 1: base %q, want a full", got)
	}
}
