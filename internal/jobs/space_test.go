package jobs

import (
	"errors"
	"strings"
	"testing"

	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestOwnerQuota (issue 33, finding 6): one owner's repeated exports stop
// at its quota, RESOURCE_EXHAUSTED naming it, before and while they
// write, and commit nothing past it; another owner exports as before.
func TestOwnerQuota(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			greedy, other := storetest.Owner("greedy"), storetest.Owner("other")
			fill(t, st, greedy, 50)
			fill(t, st, other, 50)
			// The quota fits two of greedy's backups and part of a third.
			probe := newHarness(t, st)
			j, err := probe.m.StartExport(t.Context(), "tester", exportReq(other, "size"))
			if err != nil {
				t.Fatal(err)
			}
			size := int64(objectSize(t, st, waitDone(t, probe.m, j.ID)))
			h := newHarness(t, st, func(c *Config) { c.OwnerQuota = size*2 + size/2 })
			var complete int
			for i := range 4 {
				j, err := h.m.StartExport(t.Context(), "tester", exportReq(greedy, "again"))
				if err != nil {
					if !errors.Is(err, ErrOwnerQuota) || fault.Of(err) != fault.Exhausted || !strings.Contains(err.Error(), "--owner-backup-quota") {
						t.Fatalf("export %d refused: %v; want ErrOwnerQuota naming the flag", i, err)
					}
					break
				}
				j = waitDone(t, h.m, j.ID)
				switch {
				case j.State == store.JobSucceeded:
					complete++
				case j.ErrorCode == int32(fault.Exhausted) && strings.Contains(j.ErrorMessage, "quota"):
					// Cut off while it wrote: it committed nothing.
				default:
					t.Fatalf("export %d: %s %d %s", i, j.State, j.ErrorCode, j.ErrorMessage)
				}
			}
			if complete != 2 {
				t.Errorf("%d of greedy's exports completed under a quota of two and a half", complete)
			}
			used, err := st.OwnerBackupBytes(t.Context(), greedy)
			if err != nil || int64(used) > h.m.cfg.OwnerQuota {
				t.Errorf("greedy's backups hold %d bytes, over the quota %d (%v)", used, h.m.cfg.OwnerQuota, err)
			}
			if list, _ := st.ListBackups(t.Context(), store.BackupQuery{Owner: greedy, Limit: 10}); len(list) != complete {
				t.Errorf("greedy has %d catalog rows for %d complete backups: a refused export left one", len(list), complete)
			}
			// Another owner is not held by greedy's quota.
			j, err = h.m.StartExport(t.Context(), "tester", exportReq(other, "unaffected"))
			if err != nil {
				t.Fatalf("another owner's export: %v", err)
			}
			if j = waitDone(t, h.m, j.ID); j.State != store.JobSucceeded {
				t.Errorf("another owner's export: %s %s", j.State, j.ErrorMessage)
			}
		})
	}
}

// TestBucketReserve: an export to a file bucket whose filesystem has no
// more than its reserve free is refused before it writes, naming the
// reserve; none refuses nothing.
func TestBucketReserve(t *testing.T) {
	st := enginetest.SQLite(t)
	owner := storetest.Owner("o")
	fill(t, st, owner, 5)
	h := newHarness(t, st, func(c *Config) { c.BucketReserve = 1 << 62 })
	_, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "no room"))
	if !errors.Is(err, ErrBucketReserve) || fault.Of(err) != fault.Exhausted || !strings.Contains(err.Error(), "--bucket-reserve") {
		t.Fatalf("export past the reserve: %v; want ErrBucketReserve naming the flag", err)
	}
	h = newHarness(t, st, func(c *Config) { c.BucketReserve = -1 })
	j, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "room"))
	if err != nil {
		t.Fatal(err)
	}
	if j = waitDone(t, h.m, j.ID); j.State != store.JobSucceeded {
		t.Errorf("export with no reserve: %s %s", j.State, j.ErrorMessage)
	}
}

// objectSize is a succeeded export's archive bytes, as its catalog row
// says.
func objectSize(t *testing.T, st store.Store, j store.Job) uint64 {
	t.Helper()
	md, _ := Progress(j)
	b, err := st.GetBackup(t.Context(), j.Owner, md.GetBackup())
	if err != nil {
		t.Fatal(err)
	}
	return b.Summary.Length
}

// TestFreeBytesOfADirectoryNotMadeYet: a file bucket's directory is made
// on its first write; its reserve is read from its nearest ancestor.
func TestFreeBytesOfADirectoryNotMadeYet(t *testing.T) {
	free, err := FreeBytes(t.TempDir() + "/not/made/yet")
	if err != nil || free == 0 {
		t.Errorf("freeBytes of a directory not made yet: %d, %v", free, err)
	}
}
