package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// The S3-compatible server the job tests write to: VersityGW, an S3
// gateway over a POSIX directory (github.com/versity/versitygw, Apache
// 2.0). It is a production gateway rather than a test double, installs
// with `go install` (make tools pins the version), and starts in well
// under a second; its posix backend stores each object as a plain file,
// so a test can read back exactly what was committed.
const (
	s3Access = "contentbackup-test"
	s3Secret = "contentbackup-test-secret"
	s3Bucket = "backups"
)

type gateway struct {
	dir string // the posix root: <dir>/<bucket>/<key>
}

func startGateway(t *testing.T) (g gateway, addr string) {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		t.Fatal("versitygw is not on PATH: `make tools` installs it (go install github.com/versity/versitygw/cmd/versitygw); the job tests need a real S3-compatible server")
	}
	g.dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(g.dir, s3Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	// versitygw takes a port, not a listener: one picked free here may be
	// taken by another process before the gateway binds it. So a gateway
	// that exits (it could not bind) is started again on another port, and
	// it is ready only when the process that answers is still this one.
	for attempt := 1; ; attempt++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = lis.Addr().String()
		lis.Close()
		// With its metadata (extended attributes): without it the
		// gateway cannot list incomplete multipart uploads, which an
		// erasure must find and abort.
		cmd := exec.Command(bin, "--access", s3Access, "--secret", s3Secret, "--port", addr, "posix", g.dir)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		ready := func() bool {
			select {
			case <-exited:
				return true
			default:
			}
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err == nil
		}
		eventually.True(t, 20*time.Second, ready, func() string { return fmt.Sprintf("versitygw did not listen on %s:\n%s", addr, out.String()) })
		select {
		case <-exited:
			if attempt == 3 {
				t.Fatalf("versitygw exited three times at start; last:\n%s", out.String())
			}
			continue
		default:
		}
		return g, addr
	}
}

func (g gateway) object(key string) string {
	return filepath.Join(g.dir, s3Bucket, filepath.FromSlash(key))
}

// throttle is a TCP proxy to the gateway whose uploads run at most
// rate bytes a second (0: unlimited): a way to catch an export mid-way.
type throttle struct {
	rate atomic.Int64
	addr string
}

func startThrottle(t *testing.T, upstream string) *throttle {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	th := &throttle{addr: lis.Addr().String()}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			go func() { th.copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return th
}

func (th *throttle) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if r := th.rate.Load(); r > 0 {
				time.Sleep(time.Duration(int64(n) * int64(time.Second) / r))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// jobServer is a server with an S3 bucket "s3" (through the throttle) and
// its embedded file bucket "local": the built binary when bin is set (a
// test that kills it), run in the test's process otherwise.
type jobServer struct {
	bin, dataDir string
	env          []string
	adjust       func(*cli) // in process: what no flag sets
	addr         string
	proc         *os.Process // the binary's
	served       *served     // in process
	logs         func() string
}

func (s *jobServer) start(t *testing.T) *grpc.ClientConn {
	t.Helper()
	if s.bin == "" {
		s.served = serveInWith(t, s.adjust, s.env...)
		s.addr, s.logs = s.served.addr, s.served.logs
	} else {
		s.addr, s.logs, s.proc = startBinary(t, s.bin, s.env...)
	}
	return s.as(t, opsJobToken)
}

// stop ends the server as SIGTERM does, and waits for it.
func (s *jobServer) stop() {
	if s.served != nil {
		s.served.stop()
		return
	}
	_ = s.proc.Signal(syscall.SIGTERM)
	_, _ = s.proc.Wait()
}

// as dials the server with a token of the job servers' policy.
func (s *jobServer) as(t *testing.T, token string) *grpc.ClientConn {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return dialToken(t, s.addr, tokenFile)
}

// The job servers' principals: an operator, and alice and bob, each with
// both archive scopes for their own owner only.
const (
	opsJobToken   = "ops-job-token-0123456789"
	aliceJobToken = "alice-job-token-0123456789"
	bobJobToken   = "bob-job-token-0123456789"
)

func jobPolicy(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policy := "principals:\n" +
		"  - {name: ops, tokens_sha256: [" + auth.TokenDigest(opsJobToken) + "], scopes: [admin, owners.erase], owners: [\"*\"]}\n" +
		"  - {name: alice, tokens_sha256: [" + auth.TokenDigest(aliceJobToken) + "], scopes: [archive.export, archive.import, conversations.read], owners: [alice]}\n" +
		"  - {name: bob, tokens_sha256: [" + auth.TokenDigest(bobJobToken) + "], scopes: [archive.export, archive.import, conversations.read], owners: [bob]}\n"
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newJobServer(t *testing.T, bin, s3Endpoint string) *jobServer {
	t.Helper()
	dataDir := t.TempDir()
	bucket := "s3=s3://" + s3Bucket + "?endpoint=http://" + s3Endpoint + "&region=us-east-1&use_path_style=true"
	return &jobServer{bin: bin, dataDir: dataDir, env: []string{
		"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR=" + dataDir,
		"JOB_BUCKETS=" + bucket, "JOB_LEASE=2s", "AUTH_POLICY=" + jobPolicy(t),
		"AWS_ACCESS_KEY_ID=" + s3Access, "AWS_SECRET_ACCESS_KEY=" + s3Secret, "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}}
}

// fillLarge gives owner one group of 40 messages of 256 KiB of random
// content: a 10 MiB archive.
func fillLarge(t *testing.T, conn *grpc.ClientConn, owner string) {
	t.Helper()
	conv := cb.NewConversationServiceClient(conn)
	g := storetest.FullGroup("big")
	if _, err := conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
		t.Fatal(err)
	}
	for batch := range 4 {
		var msgs []*mb.GroupMessageSave
		for i := range 10 {
			m := storetest.Message(fmt.Sprintf("m-%d-%d", batch, i), g.GetId(), int64(1000+batch*10+i))
			m.SenderInboxId = owner
			m.DecryptedMessageBytes = make([]byte, 256<<10)
			_, _ = rand.Read(m.DecryptedMessageBytes)
			msgs = append(msgs, m)
		}
		if _, err := conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: owner, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
}

func waitJob(t *testing.T, conn *grpc.ClientConn, name string) *longrunningpb.Operation {
	t.Helper()
	ops := longrunningpb.NewOperationsClient(conn)
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
		op, err := ops.WaitOperation(t.Context(), &longrunningpb.WaitOperationRequest{Name: name, Timeout: durationpb.New(5 * time.Second)})
		if err != nil {
			t.Fatalf("WaitOperation: %v", err)
		}
		if op.GetDone() {
			return op
		}
	}
	t.Fatalf("%s not done", name)
	return nil
}

// waitTransferring polls until the job has handed bytes to the object
// and not yet ended.
func waitTransferring(t *testing.T, conn *grpc.ClientConn, name string) {
	t.Helper()
	ops := longrunningpb.NewOperationsClient(conn)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		op, err := ops.GetOperation(t.Context(), &longrunningpb.GetOperationRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		md := &cb.JobMetadata{}
		if err := op.GetMetadata().UnmarshalTo(md); err != nil {
			t.Fatal(err)
		}
		if op.GetDone() {
			t.Fatalf("job ended before the test caught it mid-way: %v", op)
		}
		// Writing the archive, or uploading its last parts before the
		// commit: either way nothing is committed yet.
		if md.GetBytesDone() > 0 && md.GetRecordsDone() > 0 {
			return
		}
	}
	t.Fatal("the job never started writing")
}

func startExport(t *testing.T, conn *grpc.ClientConn, owner, bucket, label string) *longrunningpb.Operation {
	t.Helper()
	op, err := cb.NewBackupServiceClient(conn).StartExport(t.Context(), &cb.StartExportRequest{Owner: owner, Bucket: bucket, Label: label})
	if err != nil {
		t.Fatalf("StartExport: %v", err)
	}
	return op
}

// objectKey is the key the server chose for an export operation's backup.
func objectKey(t *testing.T, op *longrunningpb.Operation) string {
	t.Helper()
	md := &cb.JobMetadata{}
	if err := op.GetMetadata().UnmarshalTo(md); err != nil {
		t.Fatal(err)
	}
	return md.GetObject().GetKey()
}

func noFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (%v): an export that did not finish committed an object", path, err)
	}
}

// TestJobsAgainstS3 runs export and import jobs of the built server
// against a real S3-compatible server: a whole export is committed with
// its sidecar and matches its summary; an import of it into another owner
// gives that owner the same messages; a cancelled export and an export
// whose server is SIGKILLed mid-way commit nothing, and the killed one
// ends failed once its lease runs out on the restarted server.
func TestJobsAgainstS3(t *testing.T) {
	gw, gwAddr := startGateway(t)
	th := startThrottle(t, gwAddr)
	srv := newJobServer(t, buildServer(t), th.addr)
	conn := srv.start(t)
	fillLarge(t, conn, "alice")

	t.Run("export and import", func(t *testing.T) {
		op := waitJob(t, conn, startExport(t, conn, "alice", "s3", "full").GetName())
		if op.GetError() != nil {
			t.Fatalf("export job: %v\n%s", op.GetError(), srv.logs())
		}
		result := &cb.ExportJobResult{}
		if err := op.GetResponse().UnmarshalTo(result); err != nil {
			t.Fatal(err)
		}
		object, err := os.ReadFile(gw.object(result.GetArchive().GetKey()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(object)
		if uint64(len(object)) != result.GetSummary().GetArchiveBytes() || !bytes.Equal(sum[:], result.GetSummary().GetSha256()) {
			t.Fatalf("object: %d bytes %x; summary %v", len(object), sum, result.GetSummary())
		}
		keyResp, err := cb.NewBackupServiceClient(conn).GetBackupKey(t.Context(), &cb.GetBackupKeyRequest{Owner: "alice", Backup: result.GetBackup()})
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := backup.Verify(bytes.NewReader(object), keyResp.GetKey(), archive.ReaderOptions{}); err != nil || rep.Err != nil || rep.Messages != 40 {
			t.Fatalf("verify the object: %v %v, %d messages", err, rep.Err, rep.Messages)
		}
		sidecar, err := os.ReadFile(gw.object(result.GetArchive().GetKey() + jobs.SidecarSuffix))
		if err != nil {
			t.Fatal(err)
		}
		fromSidecar := &cb.ExportJobResult{}
		if err := protojson.Unmarshal(sidecar, fromSidecar); err != nil || fromSidecar.GetSummary().GetArchiveBytes() != uint64(len(object)) {
			t.Fatalf("sidecar: %v %s", err, sidecar)
		}

		in, err := cb.NewBackupServiceClient(conn).StartImport(t.Context(), &cb.StartImportRequest{Owner: "carol", SourceOwner: "alice", Backup: result.GetBackup()})
		if err != nil {
			t.Fatal(err)
		}
		if done := waitJob(t, conn, in.GetName()); done.GetError() != nil {
			t.Fatalf("import job: %v", done.GetError())
		}
		if a, c := messagesOf(t, conn, "alice"), messagesOf(t, conn, "carol"); a != c || a == "" {
			t.Error("carol's imported messages differ from alice's")
		}
		ownerBoundAgainstS3(t, srv, gw, result)
	})

	t.Run("a full and three increments restore the owner", func(t *testing.T) {
		chainAgainstS3(t, conn, gw)
	})

	t.Run("erasure and holds in the S3 bucket", func(t *testing.T) {
		erasureAgainstS3(t, conn, gw, gwAddr)
	})

	t.Run("cancel mid-way commits nothing", func(t *testing.T) {
		th.rate.Store(1 << 20)
		defer th.rate.Store(0)
		op := startExport(t, conn, "alice", "s3", "cancelled")
		key := objectKey(t, op)
		waitTransferring(t, conn, op.GetName())
		if _, err := longrunningpb.NewOperationsClient(conn).CancelOperation(t.Context(), &longrunningpb.CancelOperationRequest{Name: op.GetName()}); err != nil {
			t.Fatal(err)
		}
		done := waitJob(t, conn, op.GetName())
		if done.GetError().GetCode() != int32(codes.Canceled) {
			t.Fatalf("cancelled job ended %v", done.GetError())
		}
		noFile(t, gw.object(key))
		noFile(t, gw.object(key+jobs.SidecarSuffix))
	})

	t.Run("SIGKILL mid-way commits nothing, and the restarted server takes the job over to a complete backup", func(t *testing.T) {
		th.rate.Store(1 << 20)
		op := startExport(t, conn, "alice", "s3", "killed")
		key := objectKey(t, op)
		waitTransferring(t, conn, op.GetName())
		if err := srv.proc.Kill(); err != nil {
			t.Fatal(err)
		}
		_, _ = srv.proc.Wait()
		th.rate.Store(0)
		// Killed mid-upload: nothing is committed under the key.
		noFile(t, gw.object(key))
		noFile(t, gw.object(key+jobs.SidecarSuffix))
		conn := srv.start(t) // the same data directory: the same store
		done := waitJob(t, conn, op.GetName())
		md := &cb.JobMetadata{}
		if err := done.GetMetadata().UnmarshalTo(md); err != nil {
			t.Fatal(err)
		}
		if done.GetError() != nil || md.GetAttempt() != 2 {
			t.Fatalf("killed job, taken over: %v", done)
		}
		result := &cb.ExportJobResult{}
		if err := done.GetResponse().UnmarshalTo(result); err != nil {
			t.Fatal(err)
		}
		// Each attempt writes its own key (a stale attempt can never
		// touch its successor's object); the catalog names the one that
		// completed, and the first attempt's aborted upload left nothing.
		key2 := jobs.AttemptKey(key, 2)
		if result.GetArchive().GetKey() != key2 {
			t.Errorf("the second attempt wrote %q, want its own key %q", result.GetArchive().GetKey(), key2)
		}
		noFile(t, gw.object(key))
		object, err := os.ReadFile(gw.object(key2))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(object); uint64(len(object)) != result.GetSummary().GetArchiveBytes() || !bytes.Equal(sum[:], result.GetSummary().GetSha256()) {
			t.Errorf("the object is %d bytes; the summary says %d", len(object), result.GetSummary().GetArchiveBytes())
		}
		// One backup for the job, COMPLETE: none left WRITING.
		list, err := cb.NewBackupServiceClient(conn).ListBackups(t.Context(), &cb.ListBackupsRequest{Owner: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range list.GetBackups() {
			if b.GetState() == cb.BackupState_BACKUP_STATE_WRITING {
				t.Errorf("backup %s left WRITING after the takeover", b.GetId())
			}
			if b.GetId() == result.GetBackup() && b.GetState() != cb.BackupState_BACKUP_STATE_COMPLETE {
				t.Errorf("the taken-over backup is %s", b.GetState())
			}
		}
		// Its owner may export again at once.
		if again := waitJob(t, conn, startExport(t, conn, "alice", "s3", "after-kill").GetName()); again.GetError() != nil {
			t.Fatalf("export after the kill: %v", again.GetError())
		}
	})
}

// chainAgainstS3: increments written to S3 over gRPC, each holding only
// what changed since its base (a message sent before all others but
// stored late among it), restored oldest first into an empty owner, give
// it the source owner's messages.
func chainAgainstS3(t *testing.T, conn *grpc.ClientConn, gw gateway) {
	bs, conv := cb.NewBackupServiceClient(conn), cb.NewConversationServiceClient(conn)
	g := storetest.FullGroup("big")
	if _, err := conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: "erin", Group: g}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 4 {
		var msgs []*mb.GroupMessageSave
		for j := range 3 {
			m := storetest.Message(fmt.Sprintf("chain-%d-%d", i, j), g.GetId(), int64(10_000-i*100+j))
			m.SenderInboxId = "erin"
			msgs = append(msgs, m)
		}
		if _, err := conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: "erin", Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		req := &cb.StartExportRequest{Owner: "erin", Bucket: "s3", Label: fmt.Sprint("chain ", i)}
		if i > 0 {
			req.SinceBackup = ids[i-1]
		}
		op, err := bs.StartExport(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		done := waitJob(t, conn, op.GetName())
		result := &cb.ExportJobResult{}
		if done.GetError() != nil || done.GetResponse().UnmarshalTo(result) != nil {
			t.Fatalf("export %d: %v", i, done.GetError())
		}
		if result.GetSummary().GetMessages() != 3 {
			t.Errorf("member %d holds %d messages, want the 3 new ones", i, result.GetSummary().GetMessages())
		}
		if _, err := os.Stat(gw.object(result.GetArchive().GetKey())); err != nil {
			t.Errorf("member %d's object: %v", i, err)
		}
		ids = append(ids, result.GetBackup())
	}
	b, err := bs.GetBackup(t.Context(), &cb.GetBackupRequest{Owner: "erin", Backup: ids[3]})
	if err != nil || b.GetBaseBackup() != ids[2] {
		t.Fatalf("the last increment names base %q (%v), want %s", b.GetBaseBackup(), err, ids[2])
	}
	for _, id := range ids {
		op, err := bs.StartImport(t.Context(), &cb.StartImportRequest{Owner: "frank", SourceOwner: "erin", Backup: id})
		if err != nil {
			t.Fatal(err)
		}
		if done := waitJob(t, conn, op.GetName()); done.GetError() != nil {
			t.Fatalf("import %s: %v", id, done.GetError())
		}
	}
	if e, f := messagesOf(t, conn, "erin"), messagesOf(t, conn, "frank"); e != f || strings.Count(e, "\n") != 12 {
		t.Errorf("the restored chain holds\n%s\nthe source\n%s", f, e)
	}
	// Another owner cannot build on erin's backup: it reads as missing.
	_, err = bs.StartExport(t.Context(), &cb.StartExportRequest{Owner: "alice", Bucket: "s3", SinceBackup: ids[0]})
	if status.Code(err) != codes.NotFound {
		t.Errorf("an increment of another owner's backup: %v, want NotFound", err)
	}
}

// messagesOf is every message of the owner's group "big", as a string to
// compare.
func messagesOf(t *testing.T, conn *grpc.ClientConn, owner string) string {
	t.Helper()
	var b strings.Builder
	req := &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID("big"), PageSize: 100}
	for {
		resp, err := cb.NewConversationServiceClient(conn).ListMessages(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range resp.GetMessages() {
			fmt.Fprintf(&b, "%x:%x:%d\n", m.GetMessage().GetId(), sha256.Sum256(m.GetMessage().GetDecryptedMessageBytes()), m.GetMessage().GetSentAtNs())
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return b.String()
		}
	}
}

// TestScheduleInTheBinary: a --schedule policy exports its owners on its
// cron schedule into the default file bucket, keeping the newest keep
// archives, each with its sidecar.
func TestScheduleInTheBinary(t *testing.T) {
	dataDir := t.TempDir()
	policy := filepath.Join(t.TempDir(), "schedule.yaml")
	if err := os.WriteFile(policy, []byte(`
schedules:
  - name: often
    cron: "@every 1s"
    owners: [alice]
    bucket: local
    prefix: often/
    keep: 2
`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := &jobServer{dataDir: dataDir, env: []string{
		"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR=" + dataDir, "SCHEDULE=" + policy,
		"AUTH_POLICY=" + jobPolicy(t),
	}}
	conn := srv.start(t)
	populate := cb.NewConversationServiceClient(conn)
	if _, err := populate.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: "alice", Group: storetest.FullGroup("g")}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(dataDir, "backups", "often", "alice")
	// Planted in alice's prefix by someone else, named and paired as a
	// backup would be, and oldest by name: retention reads the catalog, so
	// it survives and is never listed.
	planted := filepath.Join(dir, "00000000000000000000000000000000"+jobs.ArchiveSuffix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{planted, planted + jobs.SidecarSuffix} {
		if err := os.WriteFile(p, []byte("planted"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var archives []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ops, err := longrunningpb.NewOperationsClient(conn).ListOperations(t.Context(), &longrunningpb.ListOperationsRequest{Filter: `done = true`})
		if err != nil {
			t.Fatal(err)
		}
		archives, _ = filepath.Glob(filepath.Join(dir, "*"+jobs.ArchiveSuffix))
		if len(ops.GetOperations()) >= 4 && len(archives) == 3 {
			break
		}
	}
	if len(archives) != 3 {
		t.Fatalf("after several firings, %d archives in %s, want keep=2 and the planted one:\n%s", len(archives), dir, srv.logs())
	}
	if _, err := os.Stat(planted); err != nil {
		t.Errorf("retention deleted an object the catalog does not hold: %v", err)
	}
	// A tick's backup is complete a moment before its retention runs:
	// the catalog holds keep=2 between those moments.
	complete := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && complete != 2; time.Sleep(20 * time.Millisecond) {
		list, err := cb.NewBackupServiceClient(conn).ListBackups(t.Context(), &cb.ListBackupsRequest{Owner: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		complete = 0
		for _, b := range list.GetBackups() {
			if strings.Contains(b.GetObject().GetKey(), "00000000000000000000000000000000") {
				t.Fatalf("the planted object is listed as a backup: %v", b)
			}
			if b.GetState() == cb.BackupState_BACKUP_STATE_COMPLETE {
				complete++
			}
		}
	}
	if complete != 2 {
		t.Errorf("%d complete backups listed, want keep=2", complete)
	}
	// Each archive has its sidecar, unless retention has since deleted it
	// (it deletes the sidecar first, so an archive about to go can be
	// seen alone for a moment): a lone archive must go or gain its
	// sidecar, never stay alone.
	for _, a := range archives {
		exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
		eventually.True(t, 10*time.Second, func() bool { return exists(a+jobs.SidecarSuffix) || !exists(a) },
			func() string { return a + " stays without its sidecar" })
	}
	if !strings.Contains(srv.logs(), `"principal":"schedule:often"`) {
		t.Errorf("no job logged as the schedule's principal:\n%s", srv.logs())
	}
}

// ownerBoundAgainstS3: bob cannot reach alice's backup in the S3 bucket by
// any name: not by its catalog id under his own owner, not under hers
// (refused at the door), not by the object's key (no request names one
// any more); every way reads as an unknown backup does, and nothing of
// alice's reaches bob's store.
func ownerBoundAgainstS3(t *testing.T, srv *jobServer, gw gateway, alices *cb.ExportJobResult) {
	bob := cb.NewBackupServiceClient(srv.as(t, bobJobToken))
	id := alices.GetBackup()
	unknown := jobs.NewID(time.Now())
	for name, call := range map[string]func(string) error{
		"StartImport": func(id string) error {
			_, err := bob.StartImport(t.Context(), &cb.StartImportRequest{Owner: "bob", Backup: id})
			return err
		},
		"GetBackup": func(id string) error {
			_, err := bob.GetBackup(t.Context(), &cb.GetBackupRequest{Owner: "bob", Backup: id})
			return err
		},
		"GetBackupKey": func(id string) error {
			_, err := bob.GetBackupKey(t.Context(), &cb.GetBackupKeyRequest{Owner: "bob", Backup: id})
			return err
		},
		"DeleteBackup": func(id string) error {
			_, err := bob.DeleteBackup(t.Context(), &cb.DeleteBackupRequest{Owner: "bob", Backup: id})
			return err
		},
	} {
		errTheirs, errUnknown := call(id), call(unknown)
		if status.Code(errTheirs) != codes.NotFound || strings.ReplaceAll(status.Convert(errTheirs).Message(), id, "ID") != strings.ReplaceAll(status.Convert(errUnknown).Message(), unknown, "ID") {
			t.Errorf("%s of alice's backup as bob: %v; of an unknown one: %v (want the same NOT_FOUND)", name, errTheirs, errUnknown)
		}
	}
	_, err := bob.StartImport(t.Context(), &cb.StartImportRequest{Owner: "bob", SourceOwner: "alice", Backup: id})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("bob naming alice as the source owner: %v, want PERMISSION_DENIED", err)
	}
	_, err = bob.StartImport(t.Context(), &cb.StartImportRequest{Owner: "bob", Source: alices.GetArchive()})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bob naming alice's object key: %v, want INVALID_ARGUMENT", err)
	}
	list, err := bob.ListBackups(t.Context(), &cb.ListBackupsRequest{Owner: "bob"})
	if err != nil || len(list.GetBackups()) != 0 {
		t.Errorf("bob lists %v, %v", list.GetBackups(), err)
	}
	if _, err := os.Stat(gw.object(alices.GetArchive().GetKey())); err != nil {
		t.Errorf("alice's object after bob's attempts: %v", err)
	}
	resp, err := cb.NewConversationServiceClient(srv.as(t, bobJobToken)).ListGroups(t.Context(), &cb.ListGroupsRequest{Owner: "bob"})
	if err != nil || len(resp.GetGroups()) != 0 {
		t.Errorf("bob's store after the attempts: %v, %v", resp.GetGroups(), err)
	}
}

// erasureAgainstS3 (issue 37): an owner's backups in the S3 bucket are
// kept by a legal hold (the erasure refused), then, released, erased:
// the objects and sidecars are gone from the gateway, the catalog has no
// backup of the owner, and another owner's backup is untouched.
func erasureAgainstS3(t *testing.T, conn *grpc.ClientConn, gw gateway, gwAddr string) {
	ctx := t.Context()
	backups := cb.NewBackupServiceClient(conn)
	fillLarge(t, conn, "dave")
	// What an export killed mid-upload leaves: an incomplete multipart
	// upload under dave's directory, with a part of ciphertext, which no
	// object listing shows (issue 46, finding 7).
	s3c := s3.New(s3.Options{BaseEndpoint: aws.String("http://" + gwAddr), Region: "us-east-1", UsePathStyle: true,
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(s3Access, s3Secret, ""))})
	left, err := s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s3Bucket), Key: aws.String("dave/killed-export.xmtpbak.attempt")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(s3Bucket), Key: left.Key, UploadId: left.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(bytes.Repeat([]byte("c"), 1<<20))}); err != nil {
		t.Fatal(err)
	}
	incomplete := func() int {
		out, err := s3c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s3Bucket), Prefix: aws.String("dave/")})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Uploads)
	}
	if n := incomplete(); n != 1 {
		t.Fatalf("%d incomplete uploads under dave/ before the erasure, want the one made", n)
	}
	defer func() {
		if n := incomplete(); n != 0 {
			t.Errorf("%d incomplete uploads of the erased owner left in the bucket", n)
		}
	}()
	op := waitJob(t, conn, startExport(t, conn, "dave", "s3", "to erase").GetName())
	result := &cb.ExportJobResult{}
	if op.GetError() != nil || op.GetResponse().UnmarshalTo(result) != nil {
		t.Fatalf("export: %v", op.GetError())
	}
	keys := []string{result.GetArchive().GetKey(), result.GetArchive().GetKey() + jobs.SidecarSuffix}
	for _, k := range keys {
		if _, err := os.Stat(gw.object(k)); err != nil {
			t.Fatalf("the exported object %s: %v", k, err)
		}
	}
	if _, err := backups.SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: "dave", Reason: "case s3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := backups.EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "dave"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("EraseOwner under a hold: %v", err)
	}
	if _, err := backups.ReleaseLegalHold(ctx, &cb.ReleaseLegalHoldRequest{Owner: "dave"}); err != nil {
		t.Fatal(err)
	}
	erase, err := backups.EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "dave"})
	if err != nil {
		t.Fatal(err)
	}
	done := waitJob(t, conn, erase.GetName())
	res := &cb.EraseOwnerResult{}
	if done.GetError() != nil || done.GetResponse().UnmarshalTo(res) != nil || res.GetBackups() != 1 || res.GetObjects() < 2 {
		t.Fatalf("erasure: %v %v", done.GetError(), res)
	}
	for _, k := range keys {
		if _, err := os.Stat(gw.object(k)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("object %s after the erasure: %v", k, err)
		}
	}
	if _, err := backups.GetBackupKey(ctx, &cb.GetBackupKeyRequest{Owner: "dave", Backup: result.GetBackup()}); status.Code(err) != codes.NotFound {
		t.Errorf("the erased backup's key: %v", err)
	}
	list, err := backups.ListBackups(ctx, &cb.ListBackupsRequest{Owner: "alice"})
	if err != nil || len(list.GetBackups()) == 0 {
		t.Errorf("alice's backups after dave's erasure: %v, %v", list, err)
	}
}

// TestHistoryServerAgainstS3 (issue 38): the server binary with
// --history-listen and a history bucket on the S3 gateway: an upload is
// stored in the gateway's bucket and downloads whole; once its retention
// has passed the expiry worker deletes the object from the gateway and
// the id is 404.
func TestHistoryServerAgainstS3(t *testing.T) {
	gw, gwAddr := startGateway(t)
	srv := newJobServer(t, "", gwAddr)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	historyAddr := lis.Addr().String()
	lis.Close()
	srv.env = append(srv.env, "HISTORY_LISTEN_ADDR="+historyAddr,
		"HISTORY_BUCKET=s3://"+s3Bucket+"?endpoint=http://"+gwAddr+"&region=us-east-1&use_path_style=true",
		"HISTORY_RETENTION=2s", "EXPIRY_PURGE_INTERVAL=250ms")
	srv.start(t)
	base := "http://" + historyAddr
	body := make([]byte, 3<<20)
	_, _ = rand.Read(body)
	resp, err := http.Post(base+"/upload", "", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	idb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := string(idb)
	if resp.StatusCode != http.StatusOK || len(id) != 40 {
		t.Fatalf("upload: %d %q\n%s", resp.StatusCode, id, srv.logs())
	}
	stored, err := os.ReadFile(gw.object("history/" + id))
	if err != nil || !bytes.Equal(stored, body) {
		t.Fatalf("the object in the gateway: %d bytes, %v", len(stored), err)
	}
	resp, err = http.Get(base + "/files/" + id)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(got))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := os.Stat(gw.object("history/" + id))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired object is still in the gateway: %v\n%s", err, srv.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err = http.Get(base + "/files/" + id)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("an expired id: %d, want 404", resp.StatusCode)
	}
	if strings.Contains(srv.logs(), id) {
		t.Error("the server log holds a full history id")
	}
	// The HTTP/JSON listener's bounds on anonymous requests: headers past
	// httpjson.MaxHeaderBytes are refused before any handler runs.
	req, _ := http.NewRequest(http.MethodPost, base+"/upload", strings.NewReader("x"))
	req.Header.Set("X-Padding", strings.Repeat("a", 128<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 128 KiB header: %d, want 431", resp.StatusCode)
	}
}
