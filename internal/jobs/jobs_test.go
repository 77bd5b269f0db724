package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

var readerOpts = archive.ReaderOptions{MaxRecordSize: 17 << 20, MaxWindow: 8 << 20}

// keeperURL is a local keeper (gocloud.dev/secrets/localsecrets) standing
// in for a KMS.
var keeperURL = "base64key://" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))

type harness struct {
	m      *Manager
	store  store.Store
	dir    string // the file bucket's directory
	bucket *blob.Bucket
}

func newHarness(t *testing.T, st store.Store, tune ...func(*Config)) *harness {
	t.Helper()
	ctx := t.Context()
	kek, err := keyring.Open(ctx, keeperURL, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kek.Close() })
	dir := t.TempDir()
	buckets := NewBuckets(map[string]string{"local": "file://" + dir + "?no_tmp_dir=1&metadata=skip"})
	t.Cleanup(func() { buckets.Close() })
	cfg := Config{Store: st, KEK: kek, Buckets: buckets, Pool: budget.NewPool(1 << 30),
		Import: backup.ImportOptions{ReadAheadBytes: 64 << 20, Reader: readerOpts},
		Lease:  2 * time.Second, Renew: 50 * time.Millisecond}
	for _, f := range tune {
		f(&cfg)
	}
	m := New(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Runner.Close(ctx)
	})
	bk, err := buckets.Open(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	return &harness{m: m, store: st, dir: dir, bucket: bk}
}

// fill gives owner groups, messages and consent to export.
func fill(t *testing.T, st store.Store, owner string, messages int) {
	ctx := t.Context()
	for _, id := range []string{"g-one", "g-two"} {
		if _, err := st.PutGroup(ctx, owner, storetest.FullGroup(id)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendMessages(ctx, owner, storetest.Messages(id+"-m", storetest.GroupID(id), messages, 1000), store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.MergeConsent(ctx, owner, []*cs.ConsentSave{storetest.Consent("someone", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 5)}); err != nil {
		t.Fatal(err)
	}
}

func waitDone(t *testing.T, m *Manager, id string) store.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	j, err := m.Runner.Wait(ctx, id, 20*time.Millisecond)
	if err != nil {
		t.Fatalf("wait for job %s: %v", id, err)
	}
	return j
}

func exportReq(owner, label string) ExportRequest {
	return ExportRequest{Owner: owner, Label: label}
}

// objectOf is where a job's backup is, as its metadata says.
func objectOf(t *testing.T, j store.Job) *pv.ObjectLocation {
	t.Helper()
	md, err := Progress(j)
	if err != nil {
		t.Fatal(err)
	}
	return md.GetObject()
}

func snapshot(t *testing.T, st store.Store, owner string) (groups []*gb.GroupSave, msgs []*mb.GroupMessageSave, consent []*cs.ConsentSave) {
	ctx := t.Context()
	err := st.Snapshot(ctx, owner, func(s store.Snapshot) error {
		if err := s.EachGroup(ctx, func(g *gb.GroupSave) error {
			g = proto.Clone(g).(*gb.GroupSave)
			g.MembershipState = 0 // import creates groups Restored (ARCH-015)
			groups = append(groups, g)
			return nil
		}); err != nil {
			return err
		}
		for _, g := range groups {
			if err := s.EachMessage(ctx, store.MessageQuery{GroupID: g.GetId()}, func(m *mb.GroupMessageSave) error {
				msgs = append(msgs, m)
				return nil
			}); err != nil {
				return err
			}
		}
		return s.EachConsent(ctx, func(c *cs.ConsentSave) error { consent = append(consent, c); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return groups, msgs, consent
}

// TestExportThenImportJob: an export job writes a complete archive and
// its sidecar to the bucket; an import job of that object into another
// owner gives that owner the source owner's records.
func TestExportThenImportJob(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st)
			src, dst := storetest.Owner("src"), storetest.Owner("dst")
			fill(t, st, src, 50)
			j, err := h.m.StartExport(t.Context(), "tester", exportReq(src, "first"))
			if err != nil {
				t.Fatal(err)
			}
			j = waitDone(t, h.m, j.ID)
			if j.State != store.JobSucceeded || j.ErrorCode != 0 {
				t.Fatalf("export job ended %s: %d %s", j.State, j.ErrorCode, j.ErrorMessage)
			}
			result := &pv.ExportJobResult{}
			if err := proto.Unmarshal(j.Result, result); err != nil {
				t.Fatal(err)
			}
			sum := result.GetSummary()
			if sum.GetGroups() != 2 || sum.GetMessages() != 100 || sum.GetConsentRecords() != 1 {
				t.Errorf("summary counts %d/%d/%d, want 2/100/1", sum.GetGroups(), sum.GetMessages(), sum.GetConsentRecords())
			}
			if want := ownerDir("", src) + result.GetBackup() + ArchiveSuffix; result.GetArchive().GetKey() != want {
				t.Errorf("object key %q, want the server's choice %q", result.GetArchive().GetKey(), want)
			}
			object, err := os.ReadFile(filepath.Join(h.dir, result.GetArchive().GetKey()))
			if err != nil {
				t.Fatal(err)
			}
			b, err := st.GetBackup(t.Context(), src, result.GetBackup())
			if err != nil {
				t.Fatal(err)
			}
			if b.State != store.BackupComplete || b.Label != "first" || b.JobID != j.ID || b.Principal != "tester" ||
				b.Summary.Length != sum.GetArchiveBytes() || !bytes.Equal(b.Summary.SHA256, sum.GetSha256()) || b.Summary.Messages != 100 {
				t.Errorf("catalog row %+v does not match the summary %v", b, sum)
			}
			testKey, err := h.m.Catalog.BackupKey(t.Context(), "tester", src, b.ID)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b.WrappedKey, testKey) {
				t.Error("the catalog holds the data key in clear")
			}
			digest := sha256.Sum256(object)
			if uint64(len(object)) != sum.GetArchiveBytes() || !bytes.Equal(digest[:], sum.GetSha256()) {
				t.Errorf("object is %d bytes, sha256 %x; summary says %d, %x", len(object), digest, sum.GetArchiveBytes(), sum.GetSha256())
			}
			rep, err := backup.Verify(bytes.NewReader(object), testKey, archive.ReaderOptions{})
			if err != nil || rep.Err != nil || rep.Messages != 100 {
				t.Errorf("verify object: %v, %v, %d messages", err, rep.Err, rep.Messages)
			}
			sidecar, err := os.ReadFile(filepath.Join(h.dir, result.GetArchive().GetKey()+SidecarSuffix))
			if err != nil {
				t.Fatal(err)
			}
			fromSidecar := &pv.ExportJobResult{}
			if err := protojson.Unmarshal(sidecar, fromSidecar); err != nil {
				t.Fatalf("sidecar is not the result as JSON: %v", err)
			}
			if !proto.Equal(fromSidecar, result) {
				t.Errorf("sidecar %v, job result %v", fromSidecar, result)
			}
			md, _ := Progress(j)
			if md.GetBytesDone() != sum.GetArchiveBytes() || md.GetRecordsDone() != 2+100+1+1 || md.GetPhase() != pv.JobPhase_JOB_PHASE_DONE {
				t.Errorf("final metadata: %v", md)
			}

			in, err := h.m.StartImport(t.Context(), "tester", ImportRequest{Owner: dst, SourceOwner: src, Backup: b.ID})
			if err != nil {
				t.Fatal(err)
			}
			in = waitDone(t, h.m, in.ID)
			if in.State != store.JobSucceeded {
				t.Fatalf("import job ended %s: %d %s", in.State, in.ErrorCode, in.ErrorMessage)
			}
			md, _ = Progress(in)
			if md.GetBytesTotal() != sum.GetArchiveBytes() || md.GetBytesDone() != sum.GetArchiveBytes() {
				t.Errorf("import progress %d of %d bytes, want %d", md.GetBytesDone(), md.GetBytesTotal(), sum.GetArchiveBytes())
			}
			g1, m1, c1 := snapshot(t, st, src)
			g2, m2, c2 := snapshot(t, st, dst)
			for what, pair := range map[string][2]any{"groups": {g1, g2}, "messages": {m1, m2}, "consent": {c1, c2}} {
				if fmt.Sprint(pair[0]) != fmt.Sprint(pair[1]) {
					t.Errorf("%s of the importing owner differ from the source owner's", what)
				}
			}
			if len(m2) != 100 {
				t.Errorf("imported %d messages, want 100", len(m2))
			}
		})
	}
}

// gatedStore holds an export's message reads at a gate: a job caught
// mid-way, for cancel and conflict tests.
type gatedStore struct {
	store.Store
	reached chan struct{}
	gate    chan struct{}
	once    sync.Once
	// stopped is closed when the held export's context ends.
	stopped  chan struct{}
	stopOnce sync.Once
}

type gatedSnapshot struct {
	store.Snapshot
	s *gatedStore
}

func (g *gatedStore) Snapshot(ctx context.Context, owner string, fn func(store.Snapshot) error) error {
	return g.Store.Snapshot(ctx, owner, func(s store.Snapshot) error { return fn(gatedSnapshot{s, g}) })
}

func (g gatedSnapshot) EachMessage(ctx context.Context, q store.MessageQuery, fn func(*mb.GroupMessageSave) error) error {
	return g.Snapshot.EachMessage(ctx, q, func(m *mb.GroupMessageSave) error {
		g.s.once.Do(func() { close(g.s.reached) })
		select {
		case <-g.s.gate:
		case <-ctx.Done():
			g.s.stopOnce.Do(func() { close(g.s.stopped) })
			return ctx.Err()
		}
		return fn(m)
	})
}

func newGated(st store.Store) *gatedStore {
	return &gatedStore{Store: st, reached: make(chan struct{}), gate: make(chan struct{}), stopped: make(chan struct{})}
}

// startGated starts an export of an owner with messages and returns once
// it is held at its first message.
func startGated(t *testing.T, messages int, key string, tune ...func(*Config)) (*gatedStore, *harness, string, store.Job) {
	t.Helper()
	st := newGated(enginetest.SQLite(t))
	h := newHarness(t, st, tune...)
	owner := storetest.Owner("o")
	fill(t, st.Store, owner, messages)
	j, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, key))
	if err != nil {
		t.Fatal(err)
	}
	<-st.reached
	return st, h, owner, j
}

// TestCancelLeavesNoObject: a cancelled export ends CANCELLED and leaves
// nothing under its key; while it ran, a second export of the owner was
// refused.
func TestCancelLeavesNoObject(t *testing.T) {
	st, h, owner, j := startGated(t, 20, "a.xmtpbak")
	if _, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "b.xmtpbak")); !errors.Is(err, store.ErrJobConflict) {
		t.Errorf("second export of a running owner: %v, want ErrJobConflict", err)
	}
	if _, err := h.m.Runner.Cancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	j = waitDone(t, h.m, j.ID)
	if j.State != store.JobCancelled || j.ErrorCode != int32(codes.Canceled) {
		t.Fatalf("cancelled job: state %s, error %d %s", j.State, j.ErrorCode, j.ErrorMessage)
	}
	if names := files(t, h.dir); len(names) != 0 {
		t.Errorf("a cancelled export left %v", names)
	}
	if l, _ := st.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 10}); len(l) != 0 {
		t.Errorf("a cancelled export left %d catalog rows", len(l))
	}
	// The owner may export again.
	close(st.gate)
	j2, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "a.xmtpbak"))
	if err != nil {
		t.Fatal(err)
	}
	if j2 = waitDone(t, h.m, j2.ID); j2.State != store.JobSucceeded {
		t.Fatalf("export after a cancel: %s %s", j2.State, j2.ErrorMessage)
	}
}

// TestCancelSeenThroughTheStore: a cancel asked on another replica (only
// in the store) stops the job within a renewal.
func TestCancelSeenThroughTheStore(t *testing.T) {
	st, h, _, j := startGated(t, 5, "a.xmtpbak")
	// While it runs, its progress reaches the store with each renewal:
	// the metadata record at least is written.
	var md *pv.JobProgress
	eventually.True(t, 10*time.Second, func() bool {
		got, err := st.GetJob(t.Context(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if md, err = Progress(got); err != nil {
			t.Fatal(err)
		}
		return md.GetRecordsDone() >= 1 && md.GetPhase() == pv.JobPhase_JOB_PHASE_TRANSFERRING
	}, func() string { return fmt.Sprintf("no progress recorded: %v", md) })
	if _, err := st.RequestCancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	if j = waitDone(t, h.m, j.ID); j.State != store.JobCancelled {
		t.Fatalf("job ended %s, want cancelled", j.State)
	}
	if names := files(t, h.dir); len(names) != 0 {
		t.Errorf("left %v", names)
	}
}

func files(t *testing.T, dir string) []string {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, strings.TrimPrefix(path, dir))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestStartRefusals: every malformed or impossible start is refused
// before a job exists, with an error naming what was wrong; a caller can
// no longer name a key in a bucket nor a key ref.
func TestStartRefusals(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	owner := storetest.Owner("o")
	cases := []struct {
		name string
		req  ExportRequest
		want error
		msg  string
	}{
		{"no owner", ExportRequest{}, ErrInvalid, "owner"},
		{"unknown bucket", ExportRequest{Owner: owner, Bucket: "s3"}, ErrInvalid, "bucket"},
		{"label too long", ExportRequest{Owner: owner, Label: strings.Repeat("x", 129)}, ErrInvalid, "label"},
		{"label control", ExportRequest{Owner: owner, Label: "a\nb"}, ErrInvalid, "label"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.m.StartExport(t.Context(), "tester", c.req)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err %v, want %v naming %q", err, c.want, c.msg)
			}
			if strings.Contains(fmt.Sprint(err), "local") && c.name == "unknown bucket" {
				t.Errorf("the error lists the configured buckets: %v", err)
			}
		})
	}
	imports := []struct {
		name string
		req  ImportRequest
		want error
	}{
		{"bad id", ImportRequest{Owner: owner, Backup: "../x"}, ErrInvalid},
		{"unknown id", ImportRequest{Owner: owner, Backup: NewID(time.Now())}, ErrBackupNotFound},
	}
	for _, c := range imports {
		if _, err := h.m.StartImport(t.Context(), "tester", c.req); !errors.Is(err, c.want) {
			t.Errorf("import %s: %v, want %v", c.name, err, c.want)
		}
	}
	if jobs, _ := st.ListJobs(t.Context(), store.JobQuery{Limit: 10}); len(jobs) != 0 {
		t.Errorf("refused starts stored %d jobs", len(jobs))
	}
}

// catalogJunk puts an object that is no archive into the bucket and a
// complete catalog row for it, as a damaged backup would be.
func catalogJunk(t *testing.T, h *harness, owner string, body []byte) store.Backup {
	t.Helper()
	_, wrapped, err := h.m.cfg.KEK.NewDataKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	b := store.Backup{Owner: owner, ID: NewID(now), State: store.BackupWriting, Bucket: "local", Options: []byte{},
		WrappedKey: wrapped, Created: now}
	b.ObjectKey = ownerDir("", owner) + b.ID + ArchiveSuffix
	if err := h.bucket.WriteAll(t.Context(), b.ObjectKey, body, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.store.CreateBackup(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	if err := h.store.CompleteBackup(t.Context(), owner, b.ID, store.Fence{}, store.BackupSummary{Length: uint64(len(body)), At: now}); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestImportJobOfABadArchive: a backup whose object is not an archive
// under its key fails its import job with a message naming the problem,
// true to an import (what was applied stays), and applies nothing.
func TestImportJobOfABadArchive(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	owner := storetest.Owner("o")
	b := catalogJunk(t, h, owner, bytes.Repeat([]byte("not an archive"), 100))
	j, err := h.m.StartImport(t.Context(), "tester", ImportRequest{Owner: owner, Backup: b.ID})
	if err != nil {
		t.Fatal(err)
	}
	j = waitDone(t, h.m, j.ID)
	if j.State != store.JobFailed || j.ErrorCode != int32(codes.InvalidArgument) || !strings.Contains(j.ErrorMessage, "archive") ||
		strings.Contains(j.ErrorMessage, "nothing was committed") {
		t.Errorf("import of junk: %s, code %d, %q", j.State, j.ErrorCode, j.ErrorMessage)
	}
}

// TestDamagedBackupIsPermanent: a backup whose key does not open, or
// whose object is gone or of another length, is refused as a failed
// precondition (no retry helps), never as UNAVAILABLE.
func TestDamagedBackupIsPermanent(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	owner := storetest.Owner("o")
	b := catalogJunk(t, h, owner, []byte("junk"))
	other, err := keyring.Open(t.Context(), "base64key://AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, foreign, _ := other.NewDataKey(t.Context())
	b2 := catalogJunk(t, h, owner, []byte("junk"))
	if err := st.DeleteBackup(t.Context(), owner, b2.ID); err != nil {
		t.Fatal(err)
	}
	b2.WrappedKey, b2.ID = foreign, NewID(time.Now())
	if err := st.CreateBackup(t.Context(), b2); err != nil {
		t.Fatal(err)
	}
	if err := st.CompleteBackup(t.Context(), owner, b2.ID, store.Fence{}, store.BackupSummary{Length: 4, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := h.bucket.WriteAll(t.Context(), b.ObjectKey, []byte("longer junk"), nil); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{"length differs": b.ID, "foreign key": b2.ID} {
		_, err := h.m.StartImport(t.Context(), "tester", ImportRequest{Owner: owner, Backup: id})
		if !errors.Is(err, ErrBackupDamaged) {
			t.Errorf("%s: %v, want ErrBackupDamaged", name, err)
		}
	}
	if _, err := h.m.Catalog.BackupKey(t.Context(), "tester", owner, b2.ID); !errors.Is(err, ErrBackupDamaged) {
		t.Errorf("BackupKey of a foreign key: %v, want ErrBackupDamaged", err)
	}
}

// TestDeadServersJobsFail: a running job whose lease ran out (its server
// was killed) is failed by the reaper, never left running.
func TestDeadServersJobsFail(t *testing.T) {
	st := enginetest.SQLite(t)
	// One attempt: the dead job has used them all, and is not taken over
	// (TestJobsOutliveTheirReplica).
	h := newHarness(t, st, func(c *Config) { c.MaxAttempts = 1 })
	now := time.Now()
	// The export's backup row, WRITING when its server died.
	b := store.Backup{Owner: "o", ID: NewID(now), State: store.BackupWriting, Bucket: "local", ObjectKey: "o/x" + ArchiveSuffix,
		Options: []byte{}, WrappedKey: []byte{1}, Created: now}
	progress, _ := proto.Marshal(&pv.JobProgress{Kind: pv.JobKind_JOB_KIND_EXPORT, Owner: "o", Backup: b.ID})
	dead := store.Job{ID: NewID(now), Kind: store.JobExport, Owner: "o", Principal: "p", State: store.JobRunning,
		Spec: []byte{}, Progress: progress, LeaseUntil: now.Add(-time.Second), Created: now, Updated: now}
	b.JobID = dead.ID
	if err := st.CreateJob(t.Context(), dead); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBackup(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go h.m.Runner.Run(ctx)
	j := waitDone(t, h.m, dead.ID)
	if j.State != store.JobFailed || j.ErrorCode != int32(codes.Unavailable) || !strings.Contains(j.ErrorMessage, "stopped") {
		t.Errorf("dead job: %s, %d %s", j.State, j.ErrorCode, j.ErrorMessage)
	}
	eventually.True(t, 5*time.Second, func() bool {
		_, err := st.GetBackup(t.Context(), "o", b.ID)
		return errors.Is(err, store.ErrNotFound)
	}, func() string { return "the dead export's WRITING catalog row stayed" })
}

// TestDeleteBackupWhileWriting: a backup whose export runs cannot be
// deleted; a WRITING row whose job has ended can.
func TestDeleteBackupWhileWriting(t *testing.T) {
	st, h, owner, j := startGated(t, 5, "held")
	id := objectOf(t, j).GetKey()
	md, _ := Progress(j)
	if err := h.m.Catalog.DeleteBackup(t.Context(), "tester", owner, md.GetBackup()); !errors.Is(err, ErrBackupNotComplete) {
		t.Errorf("delete of a backup being written: %v, want ErrBackupNotComplete (%s)", err, id)
	}
	close(st.gate)
	waitDone(t, h.m, j.ID)
	now := time.Now()
	left := store.Backup{Owner: owner, ID: NewID(now), State: store.BackupWriting, Bucket: "local", ObjectKey: ownerDir("", owner) + "left" + ArchiveSuffix,
		JobID: j.ID, Options: []byte{}, WrappedKey: []byte{1}, Created: now}
	if err := st.CreateBackup(t.Context(), left); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Catalog.DeleteBackup(t.Context(), "tester", owner, left.ID); err != nil {
		t.Errorf("delete of a WRITING row whose job ended: %v", err)
	}
}

// TestScheduleKeepsTheNewest: each firing exports every listed owner, and
// retention keeps the newest Keep complete backups the schedule wrote, as
// the catalog lists them: an object left in the owner's prefix by hand,
// even one named like a backup, is never counted nor deleted.
func TestScheduleKeepsTheNewest(t *testing.T) {
	st := enginetest.SQLite(t)
	var runs []string
	var mu sync.Mutex
	h := newHarness(t, st, func(c *Config) {
		c.ScheduleRun = func(schedule, outcome string) { mu.Lock(); runs = append(runs, schedule+":"+outcome); mu.Unlock() }
	})
	a, b := storetest.Owner("a"), storetest.Owner("b/..")
	fill(t, st, a, 3)
	fill(t, st, b, 3)
	policy, err := ParseSchedules([]byte(fmt.Sprintf(`
schedules:
  - name: nightly
    cron: "0 3 * * *"
    owners: [%q, %q]
    bucket: local
    prefix: nightly/
    keep: 2
`, a, b)))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScheduler(t.Context(), h.m, policy)
	if err != nil {
		t.Fatal(err)
	}
	s := policy.Schedules[0]
	// Planted by hand in b's prefix, named as a backup would be, with a
	// sidecar: the oldest by name.
	planted := ownerDir(s.Prefix, b) + "00000000000000000000000000000000" + ArchiveSuffix
	for _, k := range []string{planted, planted + SidecarSuffix} {
		if err := h.bucket.WriteAll(t.Context(), k, []byte("planted"), nil); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	var kept [][]string
	for day := range 3 {
		ids := sc.Fire(t.Context(), s, base.Add(time.Duration(day)*24*time.Hour))
		if len(ids) != 2 {
			t.Fatalf("firing %d started %d jobs, want 2", day, len(ids))
		}
		var objects []string
		for _, id := range ids {
			j := waitDone(t, h.m, id)
			if j.State != store.JobSucceeded || j.Principal != "schedule:nightly" {
				t.Fatalf("scheduled job: %s by %s: %s", j.State, j.Principal, j.ErrorMessage)
			}
			objects = append(objects, "/"+objectOf(t, j).GetKey())
		}
		kept = append(kept, objects)
	}
	var want []string
	for _, k := range append(kept[1], kept[2]...) {
		want = append(want, k, k+SidecarSuffix)
	}
	want = append(want, "/"+planted, "/"+planted+SidecarSuffix)
	sort.Strings(want)
	// Retention runs after each job; the last one's may still be going
	// (it deletes a backup's objects, then its row).
	var got []string
	rows := map[string]int{}
	eventually.Within(10*time.Second, func() bool {
		got = files(t, h.dir)
		sort.Strings(got)
		for _, owner := range []string{a, b} {
			l, _ := st.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 10})
			rows[owner] = len(l)
		}
		return fmt.Sprint(got) == fmt.Sprint(want) && rows[a] == 2 && rows[b] == 2
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after three firings with keep 2:\n got %v\nwant %v", got, want)
	}
	for owner, n := range rows {
		if n != 2 {
			t.Errorf("owner %s has %d catalog rows, want 2", owner, n)
		}
	}
	if strings.Contains(ownerDir(s.Prefix, b), "/../") {
		t.Errorf("owner %q escaped its folder: %s", b, ownerDir(s.Prefix, b))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 6 || runs[0] != "nightly:started" {
		t.Errorf("schedule runs recorded: %v", runs)
	}
}

func TestParseSchedulesRefuses(t *testing.T) {
	good := "name: n\n    cron: '@daily'\n    owners: [alice]\n    bucket: local\n    keep: 1"
	cases := map[string]string{
		"unknown field": good + "\n    color: red",
		"bad cron":      strings.Replace(good, "'@daily'", "'61 * * * *'", 1),
		"no owners":     strings.Replace(good, "[alice]", "[]", 1),
		"bad owner":     strings.Replace(good, "[alice]", "['a b']", 1),
		"keep zero":     strings.Replace(good, "keep: 1", "keep: 0", 1),
		"prefix":        good + "\n    prefix: nightly",
		"name":          strings.Replace(good, "name: n", "name: 'a/b'", 1),
	}
	for name, body := range cases {
		if _, err := ParseSchedules([]byte("schedules:\n  - " + body + "\n")); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseSchedules([]byte("schedules:\n  - " + good + "\n")); err != nil {
		t.Errorf("good policy refused: %v", err)
	}
}

// TestShutdownFailsRunningJobs: a server shutting down ends the jobs it
// runs, failed (UNAVAILABLE), with nothing committed, and starts no more.
func TestShutdownFailsRunningJobs(t *testing.T) {
	st, h, owner, j := startGated(t, 5, "a.xmtpbak")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	h.m.Runner.Close(ctx)
	j, err := st.GetJob(t.Context(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.JobFailed || j.ErrorCode != int32(codes.Unavailable) || !strings.Contains(j.ErrorMessage, "shut down") {
		t.Errorf("job after shutdown: %s %d %q", j.State, j.ErrorCode, j.ErrorMessage)
	}
	if names := files(t, h.dir); len(names) != 0 {
		t.Errorf("left %v", names)
	}
	if _, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "b.xmtpbak")); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("start after shutdown: %v", err)
	}
}

// TestMaxRunningQueues: past MaxRunning a job waits as a queued
// operation and starts when a slot frees; past the owner's queue bound a
// start is ErrQueueFull and stores nothing.
func TestMaxRunningQueues(t *testing.T) {
	st := newGated(enginetest.SQLite(t))
	h := newHarness(t, st, func(c *Config) { c.MaxRunning, c.MaxQueuedPerOwner = 1, 1 })
	a, b := storetest.Owner("a"), storetest.Owner("b")
	fill(t, st.Store, a, 2)
	fill(t, st.Store, b, 2)
	if _, err := h.m.StartExport(t.Context(), "tester", exportReq(a, "")); err != nil {
		t.Fatal(err)
	}
	<-st.reached
	queued, err := h.m.StartImport(t.Context(), "tester", ImportRequest{Owner: b, Backup: catalogJunk(t, h, b, storetest.GroupID("x")).ID})
	if err != nil {
		t.Fatalf("a job past MaxRunning 1: %v, want queued", err)
	}
	if md, _ := Progress(queued); md.GetPhase() != pv.JobPhase_JOB_PHASE_QUEUED {
		t.Errorf("phase %v, want QUEUED", md.GetPhase())
	}
	if _, err := h.m.StartExport(t.Context(), "tester", exportReq(b, "")); !errors.Is(err, ErrQueueFull) {
		t.Errorf("past the owner's queue of 1: %v, want ErrQueueFull", err)
	}
	if jobs, _ := st.ListJobs(t.Context(), store.JobQuery{Limit: 10}); len(jobs) != 2 {
		t.Errorf("%d jobs stored, want 2", len(jobs))
	}
	close(st.gate)
	if j := waitDone(t, h.m, queued.ID); j.State != store.JobFailed || j.ErrorCode != int32(codes.InvalidArgument) {
		t.Errorf("the queued import ended %s %d %q, want it run (and fail on its junk)", j.State, j.ErrorCode, j.ErrorMessage)
	}
}

// TestExportNeverReplaces: an object created at the destination while an
// export runs wins; the export fails ALREADY_EXISTS and writes no sidecar.
func TestExportNeverReplaces(t *testing.T) {
	st, h, owner, j := startGated(t, 5, "race")
	race := objectOf(t, j).GetKey()
	if err := h.bucket.WriteAll(t.Context(), race, []byte("theirs"), nil); err != nil {
		t.Fatal(err)
	}
	close(st.gate)
	j = waitDone(t, h.m, j.ID)
	if j.State != store.JobFailed || j.ErrorCode != int32(codes.AlreadyExists) {
		t.Errorf("export that lost the race: %s, code %d: %s", j.State, j.ErrorCode, j.ErrorMessage)
	}
	if got, _ := os.ReadFile(filepath.Join(h.dir, race)); string(got) != "theirs" {
		t.Errorf("the other object was replaced: %q", got)
	}
	if names := files(t, h.dir); len(names) != 1 {
		t.Errorf("files: %v", names)
	}
	if l, _ := st.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 10}); len(l) != 0 {
		t.Errorf("a failed export left %d catalog rows", len(l))
	}
}

// TestFinishedJobsExpire: the manager's reaper deletes jobs that ended
// more than KeepFinished ago, and leaves newer and running ones.
func TestFinishedJobsExpire(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st, func(c *Config) { c.KeepFinished = time.Hour })
	now := time.Now()
	for i, ended := range []time.Duration{-2 * time.Hour, -time.Minute} {
		j := store.Job{ID: NewID(now.Add(time.Duration(i))), Kind: store.JobImport, Owner: "o", Principal: "p", State: store.JobRunning, Attempt: 1,
			Spec: []byte{}, Progress: []byte{}, LeaseUntil: now.Add(time.Hour), Created: now, Updated: now}
		if err := st.CreateJob(t.Context(), j); err != nil {
			t.Fatal(err)
		}
		if err := st.FinishJob(t.Context(), j.ID, j.Attempt, store.JobEnd{State: store.JobSucceeded, At: now.Add(ended)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go h.m.Runner.Run(ctx)
	var jobs []store.Job
	eventually.True(t, 10*time.Second, func() bool {
		var err error
		if jobs, err = st.ListJobs(t.Context(), store.JobQuery{Limit: 10}); err != nil {
			t.Fatal(err)
		}
		return len(jobs) == 1 && jobs[0].Done.After(now.Add(-time.Hour))
	}, func() string {
		return fmt.Sprintf("jobs left: %d; want only the one that ended a minute ago", len(jobs))
	})
}

// TestScheduleRunsWhileAnotherOwnerFloods: alice's export holds her share
// of the slots and her imports wait queued; the schedule's tick for bob
// starts at once (counted "started", never skipped) and completes.
func TestScheduleRunsWhileAnotherOwnerFloods(t *testing.T) {
	var runs []string
	var mu sync.Mutex
	st, h, alice, _ := startGated(t, 5, "held", func(c *Config) {
		c.MaxRunning, c.MaxRunningPerOwner, c.MaxQueuedPerOwner = 2, 1, 3
		c.ScheduleRun = func(s, outcome string) { mu.Lock(); runs = append(runs, outcome); mu.Unlock() }
	})
	defer close(st.gate)
	junk := catalogJunk(t, h, alice, storetest.GroupID("x"))
	for range 3 {
		if _, err := h.m.StartImport(t.Context(), "alice", ImportRequest{Owner: alice, Backup: junk.ID}); err != nil {
			t.Fatalf("alice's queued import: %v", err)
		}
	}
	if _, err := h.m.StartImport(t.Context(), "alice", ImportRequest{Owner: alice, Backup: junk.ID}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("alice past her queue: %v", err)
	}
	bob := storetest.Owner("bob")
	fill(t, st.Store, bob, 0)
	policy, err := ParseSchedules([]byte(fmt.Sprintf("schedules:\n  - {name: bob, cron: '@daily', owners: [%q], bucket: local, keep: 3}\n", bob)))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScheduler(t.Context(), h.m, policy)
	if err != nil {
		t.Fatal(err)
	}
	// bob has no messages: his export does not wait at alice's gate.
	ids := sc.Fire(t.Context(), policy.Schedules[0], time.Now())
	if len(ids) != 1 {
		t.Fatalf("bob's tick started %d jobs", len(ids))
	}
	if j := waitDone(t, h.m, ids[0]); j.State != store.JobSucceeded {
		t.Fatalf("bob's scheduled export: %s %s", j.State, j.ErrorMessage)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(runs) != "[started]" {
		t.Errorf("schedule runs %v, want [started]", runs)
	}
}

// TestScheduleFiresOncePerFleet: two replicas on one store both fire
// every tick of an @every 5s schedule for a minute of ticks, one on time
// and one 300 ms late (or with its clock 300 ms ahead): each tick exports
// once, whichever replica claims it. Then no replica fires for three ticks
// (all down); the next tick counts them missed.
func TestScheduleFiresOncePerFleet(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			var mu sync.Mutex
			outcomes := map[string]int{}
			missed := 0
			tune := func(replica string) func(*Config) {
				return func(c *Config) {
					c.Replica = replica
					c.ScheduleRun = func(_, outcome string) { mu.Lock(); outcomes[outcome]++; mu.Unlock() }
					c.ScheduleMissed = func(_ string, n int) { mu.Lock(); missed += n; mu.Unlock() }
				}
			}
			a, b := newHarness(t, st, tune("a")), newHarness(t, st, tune("b"))
			owner := storetest.Owner("fleet")
			fill(t, st, owner, 2)
			policy, err := ParseSchedules([]byte(fmt.Sprintf(`
schedules:
  - name: often
    cron: "@every 5s"
    owners: [%q]
    bucket: local
    keep: 100
`, owner)))
			if err != nil {
				t.Fatal(err)
			}
			scA, err := NewScheduler(t.Context(), a.m, policy)
			if err != nil {
				t.Fatal(err)
			}
			scB, err := NewScheduler(t.Context(), b.m, policy)
			if err != nil {
				t.Fatal(err)
			}
			s := policy.Schedules[0]
			base := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
			fire := func(sc *Scheduler, m *Manager, at time.Time) {
				for _, id := range sc.Fire(t.Context(), s, at) {
					if j := waitDone(t, m, id); j.State != store.JobSucceeded {
						t.Fatalf("scheduled export: %s: %s", j.State, j.ErrorMessage)
					}
				}
			}
			for i := range 12 {
				tick := base.Add(time.Duration(i) * 5 * time.Second)
				fire(scA, a.m, tick.Add(7*time.Millisecond))
				fire(scB, b.m, tick.Add(300*time.Millisecond))
			}
			// Ticks 12, 13 and 14 pass with no replica up; B fires 15.
			fire(scB, b.m, base.Add(15*5*time.Second+time.Millisecond))
			backups, err := st.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Schedule: "often", Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(backups) != 13 || outcomes["started"] != 13 || outcomes["claimed_elsewhere"] != 12 {
				t.Errorf("%d backups, outcomes %v; want 13 backups, 13 started and 12 claimed elsewhere", len(backups), outcomes)
			}
			if missed != 3 {
				t.Errorf("%d ticks counted missed; want 3", missed)
			}
		})
	}
}

// TestEveryIsAlignedAcrossReplicas: @every ticks fall on the same grid
// whenever a replica started, where cron's own @every counts from each
// process's start and two replicas would never name the same tick.
func TestEveryIsAlignedAcrossReplicas(t *testing.T) {
	p, err := ParseSchedules([]byte("schedules:\n  - {name: s, cron: \"@every 5s\", owners: [o], bucket: local, keep: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := p.Schedules[0]
	started := []time.Time{time.Date(2026, 1, 1, 0, 0, 1, 300_000_000, time.UTC), time.Date(2026, 1, 1, 0, 0, 3, 0, time.UTC)}
	for _, at := range started {
		if next := s.spec.Next(at); !next.Equal(time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)) {
			t.Errorf("a replica started at %s fires next at %s; want 00:00:05", at.Format(time.StampMilli), next.Format(time.StampMilli))
		}
	}
	if got := s.Tick(time.Date(2026, 1, 1, 0, 0, 5, 400_000_000, time.UTC)); !got.Equal(time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)) {
		t.Errorf("a firing 0.4 s late names tick %s", got)
	}
}

// TestStartWithRequestID: starts that repeat a request id (AIP-155) get
// the first start's job, sequentially or at once, and start nothing: one
// job, one backup. A malformed request id is refused.
func TestStartWithRequestID(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st)
			owner := storetest.Owner("retried")
			fill(t, st, owner, 2)
			req := exportReq(owner, "x")
			req.RequestID = "2f1c7a52-9b1e-4c1e-8f4a-0d6f1f0b9c11"
			ids := make([]string, 4)
			var wg sync.WaitGroup
			for i := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					j, err := h.m.StartExport(t.Context(), "tester", req)
					if err != nil {
						t.Errorf("start %d: %v", i, err)
						return
					}
					ids[i] = j.ID
				}()
			}
			wg.Wait()
			for _, id := range ids[1:] {
				if id != ids[0] {
					t.Fatalf("starts with one request id got jobs %v; want one", ids)
				}
			}
			if j := waitDone(t, h.m, ids[0]); j.State != store.JobSucceeded {
				t.Fatalf("the job: %s %s", j.State, j.ErrorMessage)
			}
			// Retried after it ended: still the same job, nothing new.
			if j, err := h.m.StartExport(t.Context(), "tester", req); err != nil || j.ID != ids[0] {
				t.Errorf("a start retried after the job ended: %v, %v; want job %s", j.ID, err, ids[0])
			}
			backups, err := st.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 10})
			if err != nil || len(backups) != 1 {
				t.Errorf("%d backups, %v; want 1", len(backups), err)
			}
			jobs, _ := st.ListJobs(t.Context(), store.JobQuery{Owner: owner, Limit: 10})
			if len(jobs) != 1 {
				t.Errorf("%d jobs; want 1", len(jobs))
			}
			bad := exportReq(owner, "y")
			bad.RequestID = "has space"
			if _, err := h.m.StartExport(t.Context(), "tester", bad); !errors.Is(err, ErrInvalid) {
				t.Errorf("a malformed request id: %v; want ErrInvalid", err)
			}
		})
	}
}
