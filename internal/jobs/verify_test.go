package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestScheduledVerificationFindsDamage: a schedule's verification reads
// its backups back, the least recently verified first; a sound backup
// verifies, and a byte flipped in a stored object, a truncated object and
// a vanished one are each found by the next run, named in the catalog and
// reported, on both engines.
func TestScheduledVerificationFindsDamage(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			var mu sync.Mutex
			outcomes := map[bool]int{}
			h := newHarness(t, st, func(c *Config) {
				c.Freshness.BackupVerified = func(_, _ string, _ time.Time, ok bool) { mu.Lock(); outcomes[ok]++; mu.Unlock() }
			})
			owner := storetest.Owner("v")
			fill(t, st, owner, 20)
			policy, err := ParseSchedules([]byte(fmt.Sprintf("schedules:\n  - name: nightly\n    cron: '0 3 * * *'\n    owners: [%q]\n    bucket: local\n    keep: 10\n    verify: {cron: '0 4 * * *', sample: 2}\n", owner)))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := NewScheduler(t.Context(), h.m, policy)
			if err != nil {
				t.Fatal(err)
			}
			s := policy.Schedules[0]
			base := time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC)
			var backups []store.Backup
			for day := range 3 {
				for _, id := range sc.Fire(t.Context(), s, base.AddDate(0, 0, day)) {
					md, _ := Progress(waitDone(t, h.m, id))
					b, err := st.GetBackup(t.Context(), owner, md.GetBackup())
					if err != nil {
						t.Fatal(err)
					}
					backups = append(backups, b)
				}
			}
			// Sample 2 of 3: two runs read each once (never-verified first).
			for run := range 2 {
				if read, failed := sc.FireVerify(t.Context(), s, base.AddDate(0, 0, run).Add(time.Hour)); read != 2 || failed != 0 {
					t.Fatalf("verification run %d of sound backups: read %d, failed %d", run, read, failed)
				}
			}
			for _, b := range backups {
				got, _ := st.GetBackup(t.Context(), owner, b.ID)
				if got.Verified.IsZero() || got.VerifyProblem != "" {
					t.Errorf("backup %s after two runs: verified %v, problem %q", b.ID, got.Verified, got.VerifyProblem)
				}
			}

			// Damage each of the three in its own way.
			path := func(b store.Backup) string { return filepath.Join(h.dir, filepath.FromSlash(b.ObjectKey)) }
			object, err := os.ReadFile(path(backups[0]))
			if err != nil {
				t.Fatal(err)
			}
			object[len(object)/2] ^= 0x01
			if err := os.WriteFile(path(backups[0]), object, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path(backups[1]), int64(backups[1].Summary.Length-100)); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path(backups[2])); err != nil {
				t.Fatal(err)
			}
			if read, failed := sc.FireVerify(t.Context(), policy.Schedules[0].withSample(0), base.AddDate(0, 0, 5).Add(time.Hour)); read != 3 || failed != 3 {
				t.Fatalf("verification of three damaged backups: read %d, failed %d", read, failed)
			}
			for i, want := range []string{"record", "record", "its object is gone"} {
				got, _ := st.GetBackup(t.Context(), owner, backups[i].ID)
				if !strings.Contains(got.VerifyProblem, want) {
					t.Errorf("damaged backup %d: problem %q, want it to name %q", i, got.VerifyProblem, want)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if outcomes[true] != 4 || outcomes[false] != 3 {
				t.Errorf("reported %d sound and %d damaged, want 4 and 3", outcomes[true], outcomes[false])
			}
		})
	}
}

// withSample is s reading sample backups per owner (0: all).
func (s *Schedule) withSample(sample int) *Schedule {
	c := *s
	v := *s.Verify
	v.Sample = sample
	c.Verify = &v
	return &c
}

// TestFreshnessIsAnnounced: what the alert rules read reaches the hooks:
// each schedule's interval and each owner's newest backup from the
// catalog when a scheduler starts (a restarted replica forgets nothing),
// then each scheduled backup and retention run as they happen.
func TestFreshnessIsAnnounced(t *testing.T) {
	st := enginetest.SQLite(t)
	var mu sync.Mutex
	events := map[string]string{}
	note := func(k, v string) { mu.Lock(); events[k] = v; mu.Unlock() }
	fresh := Freshness{
		BackupSucceeded:  func(s, o string, at time.Time) { note("success "+s+" "+o, fmt.Sprint(at.UnixMilli())) },
		RetentionRan:     func(s string, _ time.Time, err error) { note("retention "+s, fmt.Sprint(err)) },
		ScheduleInterval: func(s string, d time.Duration) { note("interval "+s, d.String()) },
	}
	h := newHarness(t, st, func(c *Config) { c.Freshness = fresh })
	owner := storetest.Owner("f")
	fill(t, st, owner, 2)
	policy, err := ParseSchedules([]byte(fmt.Sprintf("schedules:\n  - {name: nightly, cron: '0 3 * * *', owners: [%q], bucket: local, keep: 2}\n  - {name: often, cron: '@every 5s', owners: [%q], bucket: local, keep: 2}\n", owner, owner)))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScheduler(t.Context(), h.m, policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range sc.Fire(t.Context(), policy.Schedules[0], time.Now()) {
		waitDone(t, h.m, id)
	}
	// A second scheduler, as a replica starting, reads the newest backup.
	mu.Lock()
	first := events["success nightly "+owner]
	delete(events, "success nightly "+owner)
	mu.Unlock()
	if _, err := NewScheduler(t.Context(), h.m, policy); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return events["retention nightly"] == "<nil>"
	}, func() string { return fmt.Sprint(events) })
	mu.Lock()
	defer mu.Unlock()
	// The export announces its end; the catalog holds when the backup was
	// completed, a moment before.
	var afterExport, fromCatalog int64
	fmt.Sscan(first, &afterExport)
	fmt.Sscan(events["success nightly "+owner], &fromCatalog)
	if afterExport == 0 || fromCatalog == 0 || afterExport-fromCatalog < 0 || afterExport-fromCatalog > 1000 {
		t.Errorf("newest backup: announced %q after the export, %q from the catalog", first, events["success nightly "+owner])
	}
	if events["interval nightly"] != "24h0m0s" || events["interval often"] != "5s" {
		t.Errorf("intervals: %v", events)
	}
	if _, ok := events["success often "+owner]; ok {
		t.Errorf("a schedule with no backup announced one: %v", events)
	}
}

// TestValidateOnlyImportFailureSaysNothingApplied: a dry run that fails on
// a bad archive says it applied nothing, not that applied records stay.
func TestValidateOnlyImportFailureSaysNothingApplied(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	owner := storetest.Owner("dry")
	b := catalogJunk(t, h, owner, bytes.Repeat([]byte("not an archive"), 100))
	j, err := h.m.StartImport(t.Context(), "tester", ImportRequest{Owner: owner, Backup: b.ID, ValidateOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	j = waitDone(t, h.m, j.ID)
	if j.State != store.JobFailed || !strings.HasSuffix(j.ErrorMessage, "a validate-only import applies nothing") || strings.Contains(j.ErrorMessage, "applied so far") {
		t.Errorf("failed dry run: %s, %q", j.State, j.ErrorMessage)
	}
}

// TestVerificationUnderLoadRecordsNoDamage (issue 47, finding 7): a
// verification the server's memory budget stops is RESOURCE_EXHAUSTED for
// the call and records nothing about the backup; before, the budget's
// refusal was recorded as the backup's problem and the sound backup
// reported damaged. Once memory is back, the same backup verifies sound.
func TestVerificationUnderLoadRecordsNoDamage(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			pool := budget.NewPool(256 << 20)
			h := newHarness(t, st, func(c *Config) { c.Pool = pool })
			owner := storetest.Owner("verify-load")
			fill(t, st, owner, 200)
			res := exportDone(t, h, exportReq(owner, "sound"))
			hog := pool.NewCall("load", 256<<20)
			if err := hog.Charge(256<<20 - 64<<10); err != nil {
				t.Fatal(err)
			}
			_, err := h.m.Verifier.VerifyBackup(t.Context(), "tester", owner, res.GetBackup())
			if fault.Of(err) != fault.Exhausted {
				t.Fatalf("verification without memory: %v, want an Exhausted failure", err)
			}
			b, err := st.GetBackup(t.Context(), owner, res.GetBackup())
			if err != nil || b.VerifyProblem != "" || !b.Verified.IsZero() {
				t.Fatalf("a verification the load stopped recorded %q at %v (%v); want nothing", b.VerifyProblem, b.Verified, err)
			}
			hog.Close()
			if b, err = h.m.Verifier.VerifyBackup(t.Context(), "tester", owner, res.GetBackup()); err != nil || b.VerifyProblem != "" || b.Verified.IsZero() {
				t.Fatalf("verification with memory back: %q at %v (%v), want sound", b.VerifyProblem, b.Verified, err)
			}
		})
	}
}

// gatedKeys holds GetOwnerKey, which a verification reads first, until
// the gate opens, once armed: a verification caught mid-way.
type gatedKeys struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedKeys) GetOwnerKey(ctx context.Context, owner string) (store.OwnerKey, error) {
	if g.armed.Load() {
		g.entered <- struct{}{}
		<-g.gate
	}
	return g.Store.GetOwnerKey(ctx, owner)
}

// TestVerificationsBounded (issue 47, finding 7): on-demand verifications
// are bounded per owner and on the server; past either the call is
// RESOURCE_EXHAUSTED at once and records nothing, while another owner's
// verification within the server's bound runs.
func TestVerificationsBounded(t *testing.T) {
	st := &gatedKeys{Store: enginetest.SQLite(t), entered: make(chan struct{}, 8), gate: make(chan struct{})}
	h := newHarness(t, st, func(c *Config) { c.VerificationsAtOnce, c.VerificationsPerOwner = 2, 1 })
	ids := map[string]string{}
	alice, bob, carol := storetest.Owner("alice"), storetest.Owner("bob"), storetest.Owner("carol")
	for _, o := range []string{alice, bob, carol} {
		fill(t, st, o, 5)
		ids[o] = exportDone(t, h, exportReq(o, "sound")).GetBackup()
	}
	st.armed.Store(true)
	done := make(chan error, 2)
	for _, o := range []string{alice, bob} {
		go func() { _, err := h.m.Verifier.VerifyBackup(t.Context(), "tester", o, ids[o]); done <- err }()
		<-st.entered // holding its place
	}
	if _, err := h.m.Verifier.VerifyBackup(t.Context(), "tester", alice, ids[alice]); !errors.Is(err, ErrVerifyBusy) || fault.Of(err) != fault.Exhausted {
		t.Errorf("a second verification of one owner at once: %v, want ErrVerifyBusy (Exhausted)", err)
	}
	if _, err := h.m.Verifier.VerifyBackup(t.Context(), "tester", carol, ids[carol]); !errors.Is(err, ErrVerifyBusy) {
		t.Errorf("a third verification on a server that runs two: %v, want ErrVerifyBusy", err)
	}
	st.armed.Store(false)
	close(st.gate)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a verification holding its place: %v", err)
		}
	}
	for _, o := range []string{alice, bob, carol} {
		b, err := st.GetBackup(t.Context(), o, ids[o])
		if err != nil || b.VerifyProblem != "" {
			t.Errorf("%s's backup after the refusals: problem %q, %v", o, b.VerifyProblem, err)
		}
	}
	if b, err := h.m.Verifier.VerifyBackup(t.Context(), "tester", carol, ids[carol]); err != nil || b.VerifyProblem != "" || b.Verified.IsZero() {
		t.Errorf("carol's verification once the places are free: %q, %v", b.VerifyProblem, err)
	}
}
