package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestImportOfADeletedObjectIsNoOutage (issue 33, finding 8): an import
// whose backup's object is gone by the time it reads it ends
// FAILED_PRECONDITION saying so, not UNAVAILABLE with "starting the
// import again completes it" (which it never would).
func TestImportOfADeletedObjectIsNoOutage(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	src := storetest.Owner("src")
	fill(t, st, src, 5)
	ex, err := h.m.StartExport(t.Context(), "tester", exportReq(src, "to delete"))
	if err != nil {
		t.Fatal(err)
	}
	ex = waitDone(t, h.m, ex.ID)
	md, _ := Progress(ex)
	bk, err := st.GetBackup(t.Context(), src, md.GetBackup())
	if err != nil {
		t.Fatal(err)
	}
	// The object goes after the import was admitted, before it reads:
	// the import's queue is the window.
	gated := newGated(st)
	q := newHarness(t, gated, func(c *Config) {
		c.MaxRunning = 1
		c.Buckets = NewBuckets(map[string]string{"local": "file://" + h.dir + "?no_tmp_dir=1&metadata=skip"})
	})
	hold, err := q.m.StartExport(t.Context(), "tester", exportReq(src, "holds the slot"))
	if err != nil {
		t.Fatal(err)
	}
	<-gated.reached
	imp, err := q.m.StartImport(t.Context(), "tester", ImportRequest{Owner: storetest.Owner("dst"), SourceOwner: src, Backup: bk.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(h.dir, bk.ObjectKey)); err != nil {
		t.Fatal(err)
	}
	close(gated.gate)
	waitDone(t, q.m, hold.ID)
	j := waitDone(t, q.m, imp.ID)
	if j.State != store.JobFailed || j.ErrorCode != int32(fault.FailedPrecondition) || !strings.Contains(j.ErrorMessage, "gone") || strings.Contains(j.ErrorMessage, "completes it") {
		t.Errorf("import of a deleted object: %s %d %q; want FAILED_PRECONDITION saying it is gone", j.State, j.ErrorCode, j.ErrorMessage)
	}
}

// TestExportBlockedByARecord (issue 34): a stored record the export rules
// refuse (written before a rule) stops its owner's export, naming the
// record, and the export-blocked signal goes up for the owner; an export
// that excludes it completes, and the signal goes down.
func TestExportBlockedByARecord(t *testing.T) {
	st := enginetest.SQLite(t)
	type signal struct {
		owner   string
		blocked bool
	}
	var mu sync.Mutex
	var got []signal
	signals := func() []signal {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	h := newHarness(t, st, func(c *Config) {
		c.Freshness.ExportBlocked = func(_, owner string, blocked bool) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, signal{owner, blocked})
		}
	})
	owner := storetest.Owner("blocked")
	fill(t, st, owner, 3)
	old := storetest.Message("older build", storetest.GroupID("g-one"), 99)
	old.DeliveryStatus = 0 // refused at the door since; stored before the rule
	if _, err := st.AppendMessages(t.Context(), owner, []*mb.GroupMessageSave{old}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	j, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "blocked"))
	if err != nil {
		t.Fatal(err)
	}
	j = waitDone(t, h.m, j.ID)
	if j.State != store.JobFailed || j.ErrorCode != int32(fault.FailedPrecondition) || !strings.Contains(j.ErrorMessage, fmt.Sprintf("%x", old.GetId())) {
		t.Fatalf("export of an owner with an unexportable record: %s %d %q; want FAILED_PRECONDITION naming it", j.State, j.ErrorCode, j.ErrorMessage)
	}
	req := exportReq(owner, "the rest")
	req.Nonconforming = backup.ExcludeNonconforming
	j, err = h.m.StartExport(t.Context(), "tester", req)
	if err != nil {
		t.Fatal(err)
	}
	if j = waitDone(t, h.m, j.ID); j.State != store.JobSucceeded {
		t.Fatalf("export excluding the record: %s %q", j.State, j.ErrorMessage)
	}
	// The signal follows the job's end, which waitDone sees first.
	eventually.True(t, 10*time.Second, func() bool { return len(signals()) == 2 }, func() string { return fmt.Sprint(signals()) })
	if s := signals(); s[0] != (signal{owner, true}) || s[1] != (signal{owner, false}) {
		t.Errorf("export-blocked signals %v; want up, then down, for %s", s, owner)
	}
}

// TestExportToADirectoryThatCannotBeMade (issue 36): a file bucket whose
// directory cannot be made (a read-only filesystem, a path under a file)
// ends the export FAILED_PRECONDITION naming the directory, not "the
// store is unavailable" with the cause only in the server's log.
func TestExportToADirectoryThatCannotBeMade(t *testing.T) {
	st := enginetest.SQLite(t)
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(file, "backups") // under a file: never a directory
	h := newHarness(t, st, func(c *Config) {
		c.Buckets = NewBuckets(map[string]string{"local": "file://" + dir + "?create_dir=1&no_tmp_dir=1&metadata=skip"})
	})
	owner := storetest.Owner("alice")
	fill(t, st, owner, 3)
	j, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "nowhere"))
	if err == nil {
		j = waitDone(t, h.m, j.ID)
		err = fmt.Errorf("%w: %s", fault.New(fault.Kind(j.ErrorCode), j.ErrorMessage), j.State)
	}
	// Classified as the gRPC edge classifies it (internal/server's status
	// mapping).
	if k := fault.Of(err, fault.FileKind, store.UnavailableKind); k != fault.FailedPrecondition || !strings.Contains(err.Error(), dir) {
		t.Errorf("export to a bucket whose directory cannot be made: %v (kind %v); want FAILED_PRECONDITION naming %s", err, k, dir)
	}
}
