package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/jobs/jobstest"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/telemetry"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// testJobs is a jobs configuration over temporary directories: a local
// key-encryption key and the file bucket "local"; dir is the bucket's.
func testJobs(t testing.TB) (cfg *jobs.Config, dir string) {
	t.Helper()
	c, dir := jobstest.Local(t)
	c.Lease, c.Renew = 2*time.Second, 100*time.Millisecond
	return &c, dir
}

// withJobs is cfg serving jobs built from jc as cmd/server builds them,
// with their metrics when cfg has a registry.
func withJobs(cfg Config, jc *jobs.Config) Config {
	m := telemetry.NewJobMetrics(cfg.Metrics)
	m.Instrument(jc)
	m.Watch(AttachJobs(&cfg, *jc))
	return cfg
}

func exportJob(owner, label string) *cb.StartExportRequest {
	return &cb.StartExportRequest{Owner: owner, Label: label}
}

// exportResult is a done export operation's result.
func exportResult(t *testing.T, op *longrunningpb.Operation) *cb.ExportJobResult {
	t.Helper()
	if op.GetError() != nil {
		t.Fatalf("export job failed: %v", op.GetError())
	}
	result := &cb.ExportJobResult{}
	if err := op.GetResponse().UnmarshalTo(result); err != nil {
		t.Fatal(err)
	}
	return result
}

func waitOp(t *testing.T, conn *grpc.ClientConn, name string) *longrunningpb.Operation {
	t.Helper()
	ops := longrunningpb.NewOperationsClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		op, err := ops.WaitOperation(t.Context(), &longrunningpb.WaitOperationRequest{Name: name, Timeout: durationpb.New(10 * time.Second)})
		if err != nil {
			t.Fatalf("WaitOperation %s: %v", name, err)
		}
		if op.GetDone() {
			return op
		}
	}
	t.Fatalf("operation %s not done in a minute", name)
	return nil
}

func listNames(t *testing.T, conn *grpc.ClientConn, filter string) []string {
	t.Helper()
	var names []string
	token := ""
	for {
		resp, err := longrunningpb.NewOperationsClient(conn).ListOperations(t.Context(), &longrunningpb.ListOperationsRequest{Filter: filter, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatalf("ListOperations: %v", err)
		}
		for _, op := range resp.GetOperations() {
			names = append(names, op.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" {
			return names
		}
	}
}

// TestBackupJobsOverTCP: alice starts an export job of her own data,
// polls it with the standard Operations service to done and finds the
// summary; the object and sidecar are in the bucket; an import job of it
// into another owner succeeds.
func TestBackupJobsOverTCP(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		ops := p.as(t, opsToken)
		populate(t, cb.NewConversationServiceClient(ops), "alice")
		alice := p.as(t, aliceToken)
		op, err := cb.NewBackupServiceClient(alice).StartExport(t.Context(), exportJob("alice", "alice/1"))
		if err != nil {
			t.Fatal(err)
		}
		md := &cb.JobMetadata{}
		if err := op.GetMetadata().UnmarshalTo(md); err != nil || md.GetOwner() != "alice" || md.GetPrincipal() != "alice" || md.GetKind() != cb.JobKind_JOB_KIND_EXPORT || md.GetAttempt() != 1 {
			t.Fatalf("started operation metadata: %v, %v", md, err)
		}
		result := exportResult(t, waitOp(t, alice, op.GetName()))
		if result.GetSummary().GetMessages() == 0 || len(result.GetSummary().GetSha256()) != 32 {
			t.Errorf("summary: %v", result.GetSummary())
		}
		key := result.GetArchive().GetKey()
		if !strings.HasPrefix(key, "alice/") || !strings.Contains(key, result.GetBackup()) {
			t.Errorf("object key %q is not under alice's prefix, named by the backup %s", key, result.GetBackup())
		}
		for _, k := range []string{key, key + jobs.SidecarSuffix} {
			if _, err := os.Stat(filepath.Join(p.jobsDir, k)); err != nil {
				t.Errorf("object %s: %v", k, err)
			}
		}
		got, err := longrunningpb.NewOperationsClient(alice).GetOperation(t.Context(), &longrunningpb.GetOperationRequest{Name: op.GetName()})
		if err != nil || !got.GetDone() {
			t.Fatalf("GetOperation: %v, %v", got, err)
		}
		b, err := cb.NewBackupServiceClient(alice).GetBackup(t.Context(), &cb.GetBackupRequest{Owner: "alice", Backup: result.GetBackup()})
		if err != nil || b.GetState() != cb.BackupState_BACKUP_STATE_COMPLETE || b.GetLabel() != "alice/1" ||
			!proto.Equal(b.GetSummary(), result.GetSummary()) || b.GetOperation() != op.GetName() {
			t.Fatalf("GetBackup = %v, %v", b, err)
		}
		_, err = longrunningpb.NewOperationsClient(alice).CancelOperation(t.Context(), &longrunningpb.CancelOperationRequest{Name: op.GetName()})
		wantStatus(t, "cancel of a finished job", err, codes.FailedPrecondition)

		// A dry run first (AIP-163): the whole backup read, the import's
		// counts predicted, nothing applied.
		dry, err := cb.NewBackupServiceClient(ops).StartImport(t.Context(), &cb.StartImportRequest{Owner: "carol", SourceOwner: "alice", Backup: result.GetBackup(), ValidateOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		dryDone := waitOp(t, ops, dry.GetName())
		dryResult, dryMD := &cb.ImportJobResult{}, &cb.JobMetadata{}
		if dryDone.GetError() != nil || dryDone.GetResponse().UnmarshalTo(dryResult) != nil || dryDone.GetMetadata().UnmarshalTo(dryMD) != nil ||
			!dryMD.GetValidateOnly() || dryResult.GetCounts().GetMessages().GetInserted() != result.GetSummary().GetMessages() {
			t.Fatalf("validate-only import: %v", dryDone)
		}
		if groups, err := cb.NewConversationServiceClient(ops).ListGroups(t.Context(), &cb.ListGroupsRequest{Owner: "carol"}); err != nil || len(groups.GetGroups()) != 0 {
			t.Fatalf("carol after a dry run: %v, %v", groups, err)
		}
		if _, err := longrunningpb.NewOperationsClient(ops).DeleteOperation(t.Context(), &longrunningpb.DeleteOperationRequest{Name: dry.GetName()}); err != nil {
			t.Fatal(err)
		}

		in, err := cb.NewBackupServiceClient(ops).StartImport(t.Context(), &cb.StartImportRequest{Owner: "carol", SourceOwner: "alice", Backup: result.GetBackup()})
		if err != nil {
			t.Fatal(err)
		}
		done := waitOp(t, ops, in.GetName())
		ir := &cb.ImportJobResult{}
		if done.GetError() != nil || done.GetResponse().UnmarshalTo(ir) != nil {
			t.Fatalf("import job: %v", done.GetError())
		}
		if !proto.Equal(ir, dryResult) {
			t.Errorf("the import did %v; its dry run said %v", ir, dryResult)
		}
		if ir.GetCounts().GetMessages().GetInserted() != result.GetSummary().GetMessages() {
			t.Errorf("imported %d messages of %d", ir.GetCounts().GetMessages().GetInserted(), result.GetSummary().GetMessages())
		}
		if names := listNames(t, ops, `done = true`); len(names) != 2 {
			t.Errorf("ops lists %v, want both operations", names)
		}
		if _, err := longrunningpb.NewOperationsClient(ops).DeleteOperation(t.Context(), &longrunningpb.DeleteOperationRequest{Name: in.GetName()}); err != nil {
			t.Fatal(err)
		}
		_, err = longrunningpb.NewOperationsClient(ops).GetOperation(t.Context(), &longrunningpb.GetOperationRequest{Name: in.GetName()})
		wantStatus(t, "GetOperation after DeleteOperation", err, codes.NotFound)
	})
}

// TestBackupJobScoping: a principal without archive.export for alice
// cannot start, see, wait for, cancel, delete or list alice's export jobs;
// to it they do not exist.
func TestBackupJobScoping(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		populate(t, cb.NewConversationServiceClient(p.as(t, opsToken)), "alice")
		alice := p.as(t, aliceToken)
		op, err := cb.NewBackupServiceClient(alice).StartExport(t.Context(), exportJob("alice", "scoped.xmtpbak"))
		if err != nil {
			t.Fatal(err)
		}
		waitOp(t, alice, op.GetName())
		outsiders := map[string]*grpc.ClientConn{
			"alice's importer": p.as(t, p.idp.valid(t, "alice", "archive.import")),
			"bob's exporter":   p.as(t, p.idp.valid(t, "bob", "archive.export archive.import")),
			"alice's reader":   p.as(t, p.idp.valid(t, "alice", "conversations.read conversations.write")),
		}
		for who, conn := range outsiders {
			ops := longrunningpb.NewOperationsClient(conn)
			_, err := cb.NewBackupServiceClient(conn).StartExport(t.Context(), exportJob("alice", "x-"+strings.ReplaceAll(who, " ", "")))
			wantStatus(t, who+": StartExport for alice", err, codes.PermissionDenied)
			want := codes.NotFound
			if who == "alice's reader" {
				want = codes.PermissionDenied // no archive scope at all
			}
			_, err = ops.GetOperation(t.Context(), &longrunningpb.GetOperationRequest{Name: op.GetName()})
			wantStatus(t, who+": GetOperation", err, want)
			_, err = ops.WaitOperation(t.Context(), &longrunningpb.WaitOperationRequest{Name: op.GetName()})
			wantStatus(t, who+": WaitOperation", err, want)
			_, err = ops.CancelOperation(t.Context(), &longrunningpb.CancelOperationRequest{Name: op.GetName()})
			wantStatus(t, who+": CancelOperation", err, want)
			_, err = ops.DeleteOperation(t.Context(), &longrunningpb.DeleteOperationRequest{Name: op.GetName()})
			wantStatus(t, who+": DeleteOperation", err, want)
			if want == codes.NotFound {
				if names := listNames(t, conn, ""); len(names) != 0 {
					t.Errorf("%s lists %v", who, names)
				}
			}
		}
		// The exporter, holding archive.export for alice, sees it.
		if names := listNames(t, p.as(t, exporterToken), `owner = "alice"`); len(names) != 1 || names[0] != op.GetName() {
			t.Errorf("the exporter lists %v", names)
		}
		if _, err := longrunningpb.NewOperationsClient(alice).GetOperation(t.Context(), &longrunningpb.GetOperationRequest{Name: op.GetName()}); err != nil {
			t.Errorf("alice lost sight of her job: %v", err)
		}
		// A wait whose time runs out answers the operation as it stands,
		// never a blank one (issue 46, finding 8: a timeout that expired
		// during the job's read answered `operations/`, done, and
		// archivectl exited 0 while the job still ran).
		for _, timeout := range []time.Duration{0, time.Nanosecond, time.Microsecond} {
			got, err := longrunningpb.NewOperationsClient(alice).WaitOperation(t.Context(), &longrunningpb.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(timeout)})
			if err != nil || got.GetName() != op.GetName() || got.GetMetadata() == nil {
				t.Errorf("WaitOperation with a timeout of %s: %v (%v), want the operation %s", timeout, got, err, op.GetName())
			}
		}
	})
}

// TestBackupJobBadRequests: malformed starts and names are
// INVALID_ARGUMENT naming the field, and start nothing.
func TestBackupJobBadRequests(t *testing.T) {
	p := startPerimeter(t, enginetest.SQLite(t), false, nil)
	alice := p.as(t, aliceToken)
	backupc := cb.NewBackupServiceClient(alice)
	ctx := context.Background()
	for name, req := range map[string]*cb.StartExportRequest{
		"a key_ref":               {Owner: "alice", KeyRef: "main"},
		"a destination":           {Owner: "alice", Destination: &cb.ObjectLocation{Bucket: "local", Key: "k"}},
		"escaping key":            {Owner: "alice", Destination: &cb.ObjectLocation{Bucket: "local", Key: "../../etc/x"}},
		"unknown bucket":          {Owner: "alice", Bucket: "s3"},
		"long bucket":             {Owner: "alice", Bucket: strings.Repeat("k", 5000)},
		"long label":              {Owner: "alice", Label: strings.Repeat("k", 5000)},
		"bad window option":       {Owner: "alice", Options: &ds.ArchiveOptions{StartNs: proto.Int64(10), EndNs: proto.Int64(5)}},
		"undefined nonconforming": {Owner: "alice", Nonconforming: 9},
		"malformed request_id":    {Owner: "alice", RequestId: "has space/" + strings.Repeat("r", 300)},
		"malformed from_backup":   {Owner: "alice", FromBackup: "../" + strings.Repeat("f", 3000)},
		"from_backup with since":  {Owner: "alice", FromBackup: strings.Repeat("0", 32), SinceBackup: strings.Repeat("0", 32)},
	} {
		_, err := backupc.StartExport(ctx, req)
		wantStatus(t, name, err, codes.InvalidArgument)
		if msg := err.Error(); len(msg) > 1500 {
			t.Errorf("%s: %d-byte message echoes the request", name, len(msg))
		}
	}
	for name, req := range map[string]*cb.StartImportRequest{
		"an undefined mode":          {Owner: "alice", Backup: strings.Repeat("0", 32), Mode: 9},
		"replace with validate_only": {Owner: "alice", Backup: strings.Repeat("0", 32), Mode: cb.ImportMode_IMPORT_MODE_REPLACE, ValidateOnly: true},
	} {
		_, err := backupc.StartImport(ctx, req)
		wantStatus(t, name, err, codes.InvalidArgument)
	}
	_, err := longrunningpb.NewOperationsClient(alice).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: "operations/../../x"})
	wantStatus(t, "malformed operation name", err, codes.InvalidArgument)
	_, err = longrunningpb.NewOperationsClient(alice).ListOperations(ctx, &longrunningpb.ListOperationsRequest{Filter: "state = 1"})
	wantStatus(t, "unknown filter field", err, codes.InvalidArgument)
	_, err = longrunningpb.NewOperationsClient(alice).ListOperations(ctx, &longrunningpb.ListOperationsRequest{PageToken: "forged"})
	wantStatus(t, "forged page token", err, codes.InvalidArgument)
	if names := listNames(t, alice, ""); len(names) != 0 {
		t.Errorf("refused starts left operations %v", names)
	}
}

// TestJobMetrics: the running gauge reads 1 while an export runs and 0
// once it ended; its end is observed by kind and state, and its archive's
// bytes counted by kind, equal to the result's length.
func TestJobMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	jobsCfg, _ := testJobs(t)
	held := &heldStore{Store: enginetest.SQLite(t), reached: make(chan struct{}), release: make(chan struct{})}
	addr := serveTCP(t, withJobs(Config{Store: held, Metrics: reg}, jobsCfg), nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	populate(t, cb.NewConversationServiceClient(conn), "alice")
	op, err := cb.NewBackupServiceClient(conn).StartExport(t.Context(), exportJob("alice", "m.xmtpbak"))
	if err != nil {
		t.Fatal(err)
	}
	running := func() float64 {
		t.Helper()
		m := series(t, reg, "contentbackup_jobs_running", nil)
		if m == nil {
			t.Fatal("no contentbackup_jobs_running series")
		}
		return m.GetGauge().GetValue()
	}
	<-held.reached
	if got := running(); got != 1 {
		t.Errorf("contentbackup_jobs_running while the export runs: %v; want 1", got)
	}
	close(held.release)
	done := waitOp(t, conn, op.GetName())
	result := exportResult(t, done)
	// The end is recorded just after the operation shows done.
	var ended uint64
	eventually.True(t, 5*time.Second, func() bool {
		ended = series(t, reg, "contentbackup_jobs_duration_seconds", map[string]string{"kind": "export", "state": "succeeded"}).GetHistogram().GetSampleCount()
		return ended == 1
	}, func() string { return fmt.Sprintf("%d export ends observed as succeeded, want 1", ended) })
	if got := running(); got != 0 {
		t.Errorf("contentbackup_jobs_running after the export ended: %v; want 0", got)
	}
	bytes := series(t, reg, "contentbackup_jobs_archive_bytes_total", map[string]string{"kind": "export"}).GetCounter().GetValue()
	if want := result.GetSummary().GetArchiveBytes(); bytes != float64(want) || want == 0 {
		t.Errorf("contentbackup_jobs_archive_bytes_total{kind=export} %v; the archive is %d bytes", bytes, want)
	}
}

// series is name's series whose labels include labels (nil when none).
func series(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// heldStore holds every export's message reads until release is closed.
type heldStore struct {
	store.Store
	reached, release chan struct{}
	once             sync.Once
}

type heldSnapshot struct {
	store.Snapshot
	h *heldStore
}

func (h *heldStore) Snapshot(ctx context.Context, owner string, fn func(store.Snapshot) error) error {
	return h.Store.Snapshot(ctx, owner, func(s store.Snapshot) error { return fn(heldSnapshot{s, h}) })
}

func (s heldSnapshot) EachMessage(ctx context.Context, q store.MessageQuery, fn func(*mb.GroupMessageSave) error) error {
	return s.Snapshot.EachMessage(ctx, q, func(m *mb.GroupMessageSave) error {
		s.h.once.Do(func() { close(s.h.reached) })
		select {
		case <-s.h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return fn(m)
	})
}

// TestBackupJobsPastMaxRunning: with as many jobs running as the server
// may run, a start over TCP waits as a queued operation and runs when a
// slot frees; past the owner's queue bound it is RESOURCE_EXHAUSTED at
// once, stores no job and costs the server no job's memory reservation.
func TestBackupJobsPastMaxRunning(t *testing.T) {
	held := &heldStore{Store: enginetest.SQLite(t), reached: make(chan struct{}), release: make(chan struct{})}
	jobsCfg, _ := testJobs(t)
	jobsCfg.MaxRunning, jobsCfg.MaxQueuedPerOwner = 1, 1
	pool := budget.NewPool(DefaultLimits.MemoryBytes)
	addr := serveTCP(t, withJobs(Config{Store: held, Pool: pool}, jobsCfg), nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	populate(t, cb.NewConversationServiceClient(conn), "alice")
	populate(t, cb.NewConversationServiceClient(conn), "bob")
	first, err := cb.NewBackupServiceClient(conn).StartExport(t.Context(), exportJob("alice", "a"))
	if err != nil {
		t.Fatal(err)
	}
	<-held.reached
	queued, err := cb.NewBackupServiceClient(conn).StartExport(t.Context(), exportJob("bob", "b"))
	if err != nil {
		t.Fatalf("an export past max-jobs: %v, want it queued", err)
	}
	md := &cb.JobMetadata{}
	if err := queued.GetMetadata().UnmarshalTo(md); err != nil || md.GetPhase() != cb.JobPhase_JOB_PHASE_QUEUED || queued.GetDone() {
		t.Errorf("queued operation: %v, %v", md, err)
	}
	// The running export holds its reservation; the queued one none. The
	// server's budget then holds the same once the refused starts are
	// answered (a call's bytes go back just after its answer).
	before := pool.Held()
	_, err = cb.NewBackupServiceClient(conn).StartImport(t.Context(), &cb.StartImportRequest{Owner: "bob", Backup: strings.Repeat("0", 32)})
	wantStatus(t, "an import of an unknown backup", err, codes.NotFound)
	_, err = cb.NewBackupServiceClient(conn).StartExport(t.Context(), exportJob("bob", "b2"))
	wantStatus(t, "an export past bob's queue", err, codes.ResourceExhausted)
	if !eventually.Within(10*time.Second, func() bool { return pool.Held() == before }) {
		t.Errorf("refused starts left %d bytes of the server's budget held (%d before them)", pool.Held(), before)
	}
	if names := listNames(t, conn, ""); len(names) != 2 {
		t.Errorf("operations after refused starts: %v", names)
	}
	close(held.release)
	for _, op := range []*longrunningpb.Operation{first, queued} {
		if done := waitOp(t, conn, op.GetName()); done.GetError() != nil {
			t.Errorf("job %s: %v", op.GetName(), done.GetError())
		}
	}
}

// TestVerifyBackupOnDemand (issue 36): VerifyBackup reads one complete
// backup back now and records what it found: sound at first; after a
// byte of its object is flipped at rest, the problem, in the response and
// in the catalog. Another owner's backup is NOT_FOUND, as a missing one.
func TestVerifyBackupOnDemand(t *testing.T) {
	jobsCfg, dir := testJobs(t)
	st := enginetest.SQLite(t)
	addr := serveTCP(t, withJobs(Config{Store: st}, jobsCfg), nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	populate(t, cb.NewConversationServiceClient(conn), "alice")
	backups := cb.NewBackupServiceClient(conn)
	op, err := backups.StartExport(t.Context(), exportJob("alice", "to verify"))
	if err != nil {
		t.Fatal(err)
	}
	result := exportResult(t, waitOp(t, conn, op.GetName()))
	id := result.GetBackup()

	before := time.Now()
	b, err := backups.VerifyBackup(t.Context(), &cb.VerifyBackupRequest{Owner: "alice", Backup: id})
	if err != nil || b.GetVerifyProblem() != "" || b.GetVerifyTime().AsTime().Before(before.Add(-time.Second)) {
		t.Fatalf("VerifyBackup of a sound backup: %v, %v", b, err)
	}

	path := filepath.Join(dir, result.GetArchive().GetKey())
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	b, err = backups.VerifyBackup(t.Context(), &cb.VerifyBackupRequest{Owner: "alice", Backup: id})
	if err != nil || b.GetVerifyProblem() == "" {
		t.Fatalf("VerifyBackup of a damaged backup: %v, %v; want its problem", b, err)
	}
	stored, err := backups.GetBackup(t.Context(), &cb.GetBackupRequest{Owner: "alice", Backup: id})
	if err != nil || stored.GetVerifyProblem() != b.GetVerifyProblem() {
		t.Errorf("the catalog after VerifyBackup: %v, %v; want the problem recorded", stored, err)
	}
	_, err = backups.VerifyBackup(t.Context(), &cb.VerifyBackupRequest{Owner: "bob", Backup: id})
	wantCode(t, err, codes.NotFound, "not found")
}

// TestListOperationsForeignOwnerIsNoOracle (issue 47, finding 8): a
// ListOperations filter naming an owner the caller may not see answers
// as an owner with no jobs, page token included; before, the scan ran
// over that owner's jobs and a next-page token came back when it had
// more than one scan's worth (21 here), none when it had none.
func TestListOperationsForeignOwnerIsNoOracle(t *testing.T) {
	p := startPerimeter(t, enginetest.SQLite(t), false, nil)
	populate(t, cb.NewConversationServiceClient(p.as(t, opsToken)), "alice")
	alice := p.as(t, aliceToken)
	for i := range listScanPages + 1 {
		op, err := cb.NewBackupServiceClient(alice).StartExport(t.Context(), exportJob("alice", fmt.Sprintf("many-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		waitOp(t, alice, op.GetName())
	}
	bob := longrunningpb.NewOperationsClient(p.as(t, p.idp.valid(t, "bob", "archive.export archive.import")))
	for _, owner := range []string{"alice", "carol"} {
		resp, err := bob.ListOperations(t.Context(), &longrunningpb.ListOperationsRequest{Filter: fmt.Sprintf("owner = %q", owner), PageSize: 1})
		if err != nil || len(resp.GetOperations()) != 0 || resp.GetNextPageToken() != "" {
			t.Errorf("bob lists %s's operations: %d operations, next page %q (%v); want none and no token", owner, len(resp.GetOperations()), resp.GetNextPageToken(), err)
		}
	}
}
