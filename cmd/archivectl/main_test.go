package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/archive/archivetest"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/devpki"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// archivectl runs the built binary with env added to the environment and
// returns its stdout, stderr and error.
type tool struct {
	t   *testing.T
	bin string
	env []string
}

func (tl tool) run(args ...string) (string, string, error) {
	cmd := exec.Command(tl.bin, args...)
	cmd.Env = append(os.Environ(), tl.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// built is the one build of the binary the package's tests share: a link
// each cost the tests more than most of them take.
var built struct {
	once sync.Once
	dir  string
	bin  string
	out  []byte
	err  error
}

// build returns the archivectl binary, built once for every test.
func build(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "archivectl-test"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "archivectl")
		built.out, built.err = exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("build: %v\n%s", built.err, built.out)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// ctlToken proves the operator principal of the servers these tests run.
const ctlToken = "archivectl-test-token"

// serve runs a server on the embedded store on a loopback port, with a
// policy of one operator proven by ctlToken or by the client certificate
// CN=archivectl; creds, when set, serve TLS.
func serve(t *testing.T, creds credentials.TransportCredentials) (string, store.Store) {
	addr, s, _ := serveJobs(t, creds)
	return addr, s
}

// serveJobs is serve with jobs: a local key-encryption key and the file
// bucket "local", whose directory it returns.
func serveJobs(t *testing.T, creds credentials.TransportCredentials) (string, store.Store, string) {
	return serveJobsWith(t, creds, nil)
}

// serveJobsWith is serveJobs whose server runs policy's schedules (not
// started: they never fire, but the server knows them).
func serveJobsWith(t *testing.T, creds credentials.TransportCredentials, policy *jobs.SchedulePolicy) (string, store.Store, string) {
	s := enginetest.SQLite(t)
	kek, err := keyring.Open(t.Context(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kek.Close() })
	bucketDir := t.TempDir()
	buckets := jobs.NewBuckets(map[string]string{"local": "file://" + bucketDir + "?no_tmp_dir=1&metadata=skip"})
	t.Cleanup(func() { buckets.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := auth.ParsePolicy([]byte("principals:\n  - name: ops\n    tokens_sha256: [" + auth.TokenDigest(ctlToken) + "]\n    certificates: [CN=archivectl]\n    scopes: [admin, owners.erase]\n    owners: [\"*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.NewAuthenticator(auth.StaticPolicy(pol), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Store: s, Auth: authn, Credentials: creds}
	server.AttachJobs(&cfg, jobs.Config{KEK: kek, Buckets: buckets})
	srv := server.New(cfg, zap.NewNop())
	if policy != nil {
		if _, err := jobs.NewScheduler(t.Context(), srv.Jobs(), policy); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String(), s, bucketDir
}

func TestArchivectl(t *testing.T) {
	bin := build(t)
	addr, s := serve(t, nil)
	dir := t.TempDir()
	key := bytes.Repeat([]byte{9}, 32)
	keyHex := filepath.Join(dir, "key.hex")
	keyRaw := filepath.Join(dir, "key.raw")
	os.WriteFile(keyHex, []byte(hex.EncodeToString(key)+"\n"), 0o600)
	os.WriteFile(keyRaw, key, 0o600)
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}

	owner := storetest.Owner("ctl")
	g := storetest.FullGroup("g")
	if _, err := s.PutGroup(t.Context(), owner, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessages(t.Context(), owner, storetest.Messages("m", g.Id, 50, 1), store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(dir, "backup.xmtp")
	out, stderr, err := ctl.run("--json", "export", "--owner", owner, "--key-file", keyHex, "-o", file)
	if err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	var raw map[string]any
	// Counts are uint64 in the API: strings, as protobuf's JSON writes them.
	if err := json.Unmarshal([]byte(out), &raw); err != nil || raw["groups"] != "1" || raw["messages"] != "50" {
		t.Errorf("export --json: %s (%v)", out, err)
	}
	if strings.Contains(out+stderr, hex.EncodeToString(key)) {
		t.Error("the key was printed")
	}

	// The estimate is the export's own figures, nothing written.
	est, stderr, err := ctl.run("--json", "estimate", "--owner", owner)
	var e struct {
		Messages uint64 `json:"messages,string"`
		Bytes    uint64 `json:"archive_bytes,string"`
	}
	if err != nil || json.Unmarshal([]byte(est), &e) != nil || e.Messages != 50 || e.Bytes != uint64(fileSize(t, file)) {
		t.Errorf("estimate: %v %s\n%s", err, est, stderr)
	}

	out, _, err = ctl.run("inspect", "--key-file", keyRaw, file)
	if err != nil || !strings.Contains(out, "version:     0") || !strings.Contains(out, "MESSAGES, CONSENT") {
		t.Errorf("inspect: %v\n%s", err, out)
	}
	// The key from the environment, as hex.
	envCtl := tool{t: t, bin: bin, env: []string{"ARCHIVE_KEY=" + hex.EncodeToString(key)}}
	out, _, err = envCtl.run("--json", "verify", file)
	if err != nil || !strings.Contains(out, `"complete": true`) || !strings.Contains(out, `"messages": 50`) {
		t.Errorf("verify: %v\n%s", err, out)
	}

	other := storetest.Owner("other")
	out, stderr, err = ctl.run("import", "--owner", other, "--key-file", keyHex, file)
	if err != nil || !strings.Contains(out, "messages: 50 inserted") {
		t.Errorf("import: %v\n%s%s", err, out, stderr)
	}
	if got, _ := s.ListMessages(t.Context(), other, store.MessageQuery{GroupID: g.Id, Limit: 100}); len(got.Messages) != 50 {
		t.Errorf("imported %d messages", len(got.Messages))
	}

	// A corrupt file fails verify with the record named, exit status 1.
	data, _ := os.ReadFile(file)
	bad := filepath.Join(dir, "bad.xmtp")
	os.WriteFile(bad, data[:len(data)-10], 0o600)
	out, _, err = ctl.run("verify", "--key-file", keyHex, bad)
	if err == nil || !strings.Contains(out, "problem:  record") {
		t.Errorf("verify of a cut archive: %v\n%s", err, out)
	}

	// A key of the wrong length is refused, naming only its length.
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("abcd"), 0o600)
	_, stderr, err = ctl.run("inspect", "--key-file", short, file)
	if err == nil || !strings.Contains(stderr, "holds 4 bytes") || strings.Contains(stderr, "abcd") {
		t.Errorf("short key: %v %s", err, stderr)
	}

	// An export the server refuses leaves no file behind.
	refused := filepath.Join(dir, "refused.xmtp")
	_, stderr, err = ctl.run("export", "--owner", "has space", "--key-file", keyHex, "-o", refused)
	if err == nil || !strings.Contains(stderr, "owner") {
		t.Errorf("refused export: %v %s", err, stderr)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*refused*")); len(entries) != 0 {
		t.Errorf("files left by a refused export: %v", entries)
	}
}

func TestArchivectlRewrapLegacy(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	ctl := tool{t: t, bin: bin, env: []string{"ARCHIVE_KEY=" + hex.EncodeToString(oldKey), "NEW_ARCHIVE_KEY=" + hex.EncodeToString(newKey)}}

	// A legacy repeated-nonce archive, as writers up to libxmtp 1.6.1 made.
	els := []*ds.BackupElement{{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{ExportedAtNs: 5}}}}
	for _, m := range storetest.Messages("m", storetest.GroupID("g"), 10, 1) {
		els = append(els, &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}})
	}
	legacyData, err := archivetest.Legacy(oldKey, [12]byte{7}, els...)
	if err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(dir, "legacy.xmtp")
	os.WriteFile(legacy, legacyData, 0o600)

	out, _, err := ctl.run("--json", "verify", legacy)
	if err != nil || !strings.Contains(out, `"legacy_records": 10`) {
		t.Fatalf("verify legacy: %v\n%s", err, out)
	}
	rewrapped := filepath.Join(dir, "rewrapped.xmtp")
	out, stderr, err := ctl.run("rewrap", "-o", rewrapped, legacy)
	if err != nil || !strings.Contains(out, "11 records in the counter form") {
		t.Fatalf("rewrap: %v\n%s%s", err, out, stderr)
	}
	// Under the new key, in the counter form, with the same elements.
	f, _ := os.Open(rewrapped)
	defer f.Close()
	r, err := archive.NewReader(f, newKey, archive.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Metadata(); err != nil {
		t.Fatal(err)
	}
	var got []*mb.GroupMessageSave
	for {
		el, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, el.GetGroupMessage())
	}
	if len(got) != 10 || r.Stats().Legacy != 0 || string(got[9].Id) != "m-000009" {
		t.Errorf("rewrapped: %d messages, stats %+v", len(got), r.Stats())
	}
}

// TestArchivectlTLS: archivectl reaches a TLS server with --tls-ca and a
// token file, a mutual-TLS server with its client certificate alone, and
// without credentials is refused.
func TestArchivectlTLS(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	ca, err := devpki.NewCA("ctl test CA")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sc, sk, err := ca.Issue(devpki.Leaf{CommonName: "localhost", DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, ck, err := ca.Issue(devpki.Leaf{CommonName: "archivectl", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile := write("ca.crt", ca.CertPEM), write("client.crt", cc), write("client.key", ck)
	creds, stop, err := transport.ServerCredentials(t.Context(), transport.ServerFiles{
		CertFile: write("server.crt", sc), KeyFile: write("server.key", sk), ClientCAFile: caFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	addr, s := serve(t, creds)
	owner := storetest.Owner("tls")
	if _, err := s.PutGroup(t.Context(), owner, storetest.FullGroup("g")); err != nil {
		t.Fatal(err)
	}
	keyFileArg := write("key.hex", []byte(strings.Repeat("ab", 32)))
	tokenFile := write("token", []byte(ctlToken+"\n"))
	// A loopback address with --tls-* flags dials TLS; the name checked is
	// the certificate's.
	base := []string{"--server", "localhost" + addr[strings.LastIndexByte(addr, ':'):], "--tls-ca", caFile}
	ctl := tool{t: t, bin: bin}
	for name, args := range map[string][]string{
		"token file":         {"--token-file", tokenFile},
		"client certificate": {"--tls-cert", certFile, "--tls-key", keyFile},
	} {
		out := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".archive")
		cmd := append(append(append([]string{}, base...), args...), "export", "--owner", owner, "--key-file", keyFileArg, "--output", out)
		if _, stderr, err := ctl.run(cmd...); err != nil {
			t.Errorf("%s: export: %v\n%s", name, err, stderr)
		}
	}
	cmd := append(append([]string{}, base...), "export", "--owner", owner, "--key-file", keyFileArg, "--output", filepath.Join(dir, "anon.archive"))
	_, stderr, err := ctl.run(cmd...)
	if err == nil || !strings.Contains(stderr, "Unauthenticated") {
		t.Errorf("export without credentials: %v\n%s", err, stderr)
	}
	if strings.Contains(stderr, ctlToken) {
		t.Errorf("stderr shows the token")
	}
}

// TestArchivectlJobs: jobs start-export --wait runs an export job to its
// end; backups list shows it and backups key fetches its key, with which
// the object verifies; start-import of the backup id follows; a job that
// fails makes wait exit non-zero with its message.
func TestArchivectlJobs(t *testing.T) {
	bin := build(t)
	addr, s, bucketDir := serveJobs(t, nil)
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	owner := storetest.Owner("jobs")
	g := storetest.FullGroup("g")
	if _, err := s.PutGroup(t.Context(), owner, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessages(t.Context(), owner, storetest.Messages("m", g.Id, 30, 1), store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}

	out, stderr, err := ctl.run("jobs", "start-export", "--owner", owner, "--label", "first", "--wait")
	// protojson varies its spacing from run to run: match the field, not
	// the bytes.
	if err != nil || !strings.Contains(out, "export succeeded") || !strings.Contains(out, " 30 messages") {
		t.Fatalf("jobs start-export --wait: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err = ctl.run("backups", "list", "--owner", owner)
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, "complete") || !strings.Contains(out, "first") ||
		!strings.Contains(out, "WINDOW") || !strings.Contains(out, " all ") || !strings.Contains(out, "VERIFIED") {
		t.Fatalf("backups list: %v\n%s%s", err, out, stderr)
	}
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	out, _, err = ctl.run("--json", "backups", "show", "--owner", owner, id)
	if err != nil || !strings.Contains(out, id) {
		t.Fatalf("backups show: %v\n%s", err, out)
	}
	clear := filepath.Join(t.TempDir(), "clear.key")
	if _, stderr, err := ctl.run("backups", "key", "--owner", owner, "-o", clear, id); err != nil {
		t.Fatalf("backups key: %v %s", err, stderr)
	}
	var object string
	filepath.WalkDir(bucketDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, id+".xmtpbak") {
			object = path
		}
		return err
	})
	out, _, err = ctl.run("verify", "--key-file", clear, object)
	if err != nil || !strings.Contains(out, "complete") || !strings.Contains(out, "30 messages") {
		t.Errorf("verify with the backup's key: %v\n%s", err, out)
	}
	// The sidecar proves the object whole; a cut copy fails against it.
	if out, stderr, err := ctl.run("verify", "--key-file", clear, "--sidecar", object+jobs.SidecarSuffix, object); err != nil {
		t.Errorf("verify --sidecar: %v\n%s%s", err, out, stderr)
	}
	data, _ := os.ReadFile(object)
	cut := filepath.Join(t.TempDir(), "cut.xmtpbak")
	os.WriteFile(cut, data[:len(data)-1], 0o600)
	if _, stderr, err := ctl.run("verify", "--key-file", clear, "--sidecar", object+jobs.SidecarSuffix, cut); err == nil || !strings.Contains(stderr, "not the archive the job wrote") {
		t.Errorf("verify --sidecar of a cut copy: %v %s", err, stderr)
	}

	out, stderr, err = ctl.run("jobs", "start-import", "--owner", owner+"-copy", "--source-owner", owner, "--backup", id)
	if err != nil || !strings.Contains(out, "import") {
		t.Fatalf("jobs start-import: %v\n%s%s", err, out, stderr)
	}
	name := strings.Fields(out)[0]
	if out, stderr, err = ctl.run("jobs", "wait", name); err != nil || !strings.Contains(out, "import succeeded") {
		t.Fatalf("jobs wait: %v\n%s%s", err, out, stderr)
	}
	out, _, err = ctl.run("jobs", "list", "--owner", owner)
	if err != nil || strings.Count(out, "\n") != 2 || !strings.HasPrefix(out, "OPERATION") || !strings.Contains(out, "export succeeded") {
		t.Errorf("jobs list --owner: %v\n%s", err, out)
	}
	out, _, err = ctl.run("--json", "jobs", "get", name)
	if err != nil || !regexp.MustCompile(`"done":\s*true`).MatchString(out) {
		t.Errorf("jobs get --json: %v\n%s", err, out)
	}
	_, stderr, err = ctl.run("jobs", "cancel", name)
	if err == nil || !strings.Contains(stderr, "already ended") {
		t.Errorf("cancel of an ended job: %v %s", err, stderr)
	}
	// A backup id nobody has: NOT_FOUND, and nothing starts.
	_, stderr, err = ctl.run("jobs", "start-import", "--owner", owner, "--backup", strings.Repeat("0", 32), "--wait")
	if err == nil || !strings.Contains(stderr, "not found") {
		t.Errorf("import of an unknown backup: %v\n%s", err, stderr)
	}
	if out, stderr, err := ctl.run("backups", "delete", "--owner", owner, id); err != nil || !strings.Contains(out, "deleted") {
		t.Errorf("backups delete: %v %s %s", err, out, stderr)
	}
	if _, err := os.Stat(object); !os.IsNotExist(err) {
		t.Errorf("the deleted backup's object is still there: %v", err)
	}
}

// TestArchivectlLint: lint lists an owner's stored records the reference
// would refuse, as a table and as JSON; export fails on them by default
// and, with --nonconforming=repair, writes an archive and says what it
// left out and repaired.
func TestArchivectlLint(t *testing.T) {
	bin := build(t)
	addr, s := serve(t, nil)
	dir := t.TempDir()
	keyHex := filepath.Join(dir, "key.hex")
	os.WriteFile(keyHex, []byte(strings.Repeat("ab", 32)), 0o600)
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}

	owner := storetest.Owner("lint")
	good := storetest.MinimalGroup("good")
	bad := storetest.MinimalGroup("bad")
	bad.Id = bad.Id[:15] // stored by an older server, as the store takes it
	lone := storetest.MinimalGroup("lone")
	lone.MessageDisappearFromNs = ptrTo(int64(5))
	for _, g := range []*gb.GroupSave{good, bad, lone} {
		if _, err := s.PutGroup(t.Context(), owner, g); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AppendMessages(t.Context(), owner, storetest.Messages("in bad", bad.Id, 3, 1), store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}

	out, stderr, err := ctl.run("lint", "--owner", owner)
	if err != nil {
		t.Fatalf("lint: %v\n%s", err, stderr)
	}
	for _, want := range []string{"KIND", hex.EncodeToString(bad.Id), "a group id is 16 bytes", "with its 3 messages",
		hex.EncodeToString(lone.Id), "dropped the lone message_disappear_from_ns", "2 nonconforming, 1 repairable"} {
		if !strings.Contains(out, want) {
			t.Errorf("lint output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = ctl.run("--json", "lint", "--owner", owner)
	var js struct {
		Findings []lintRow `json:"findings"`
		Summary  struct {
			N string `json:"findings"` // a uint64: a string, as protobuf's JSON writes it
		} `json:"summary"`
	}
	if err != nil || json.Unmarshal([]byte(out), &js) != nil || js.Summary.N != "2" || len(js.Findings) != 2 {
		t.Errorf("lint --json: %v\n%s", err, out)
	}

	file := filepath.Join(dir, "x.xmtp")
	if _, stderr, err := ctl.run("export", "--owner", owner, "--key-file", keyHex, "-o", file); err == nil || !strings.Contains(stderr, "FailedPrecondition") {
		t.Errorf("default export of nonconforming records: %v %s", err, stderr)
	}
	out, stderr, err = ctl.run("export", "--owner", owner, "--key-file", keyHex, "-o", file, "--nonconforming", "repair")
	if err != nil || !strings.Contains(out, "2 groups") || !strings.Contains(out, "4 nonconforming records excluded, 1 repaired") {
		t.Errorf("export --nonconforming=repair: %v\n%s%s", err, out, stderr)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestArchivectlRetentionDryRun (issue 36): `backups retention` asks the
// server for the plan of a schedule it runs (no local copy of its policy),
// or of --keep-* rules of the caller's, over that schedule's backups or
// all of the owner's; it says which it keeps and why, and deletes nothing.
func TestArchivectlRetentionDryRun(t *testing.T) {
	bin := build(t)
	policy, err := jobs.ParseSchedules([]byte("schedules:\n  - name: nightly\n    cron: '@daily'\n    owners: [x]\n    bucket: local\n    retention: {daily: 3, weekly: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	addr, s, _ := serveJobsWith(t, nil, policy)
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	owner := storetest.Owner("ret")
	// Ten daily backups of the schedule "nightly", and one of another.
	day := time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC)
	for i := range 11 {
		b := store.Backup{Owner: owner, ID: jobs.NewID(day.AddDate(0, 0, i)), State: store.BackupWriting, Bucket: "local",
			ObjectKey: fmt.Sprintf("%s/%d.xmtpbak", owner, i), Schedule: "nightly", Options: []byte{}, WrappedKey: []byte{1}, Created: day.AddDate(0, 0, i)}
		if i == 10 {
			b.Schedule = "other"
		}
		if err := s.CreateBackup(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		if err := s.CompleteBackup(t.Context(), owner, b.ID, store.Fence{}, store.BackupSummary{SHA256: make([]byte, 32), At: b.Created}); err != nil {
			t.Fatal(err)
		}
	}
	kept := func(args ...string) (decisions int, kept []string) {
		t.Helper()
		out, stderr, err := ctl.run(append([]string{"--json", "backups", "retention", "--owner", owner}, args...)...)
		if err != nil {
			t.Fatalf("retention %v: %v\n%s", args, err, stderr)
		}
		var plan struct {
			Decisions []struct {
				Backup struct {
					CreateTime string `json:"create_time"`
				} `json:"backup"`
				Keep  bool     `json:"keep"`
				Rules []string `json:"rules"`
			} `json:"decisions"`
		}
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, d := range plan.Decisions {
			if d.Keep {
				kept = append(kept, d.Backup.CreateTime[:10]+":"+strings.Join(d.Rules, "+"))
			}
		}
		return len(plan.Decisions), kept
	}
	// Nov 10, 9, 8 by day; by ISO week, Nov 10 (a Tuesday) for the week
	// from Monday Nov 9, and Nov 8 (a Sunday) for the week before; the
	// other schedule's backup is not weighed.
	if n, k := kept("--schedule", "nightly"); n != 10 || fmt.Sprint(k) != "[2026-11-10:daily+weekly 2026-11-09:daily 2026-11-08:daily+weekly]" {
		t.Errorf("the schedule's rules: %d decisions, kept %v", n, k)
	}
	// Rules of one's own over the schedule's backups, and over all.
	if n, k := kept("--schedule", "nightly", "--keep-last", "2"); n != 10 || fmt.Sprint(k) != "[2026-11-10:last 2026-11-09:last]" {
		t.Errorf("--keep-last 2 over the schedule: %d decisions, kept %v", n, k)
	}
	if n, k := kept("--keep-last", "1"); n != 11 || fmt.Sprint(k) != "[2026-11-11:last]" {
		t.Errorf("--keep-last 1 over every backup: %d decisions, kept %v", n, k)
	}
	if l, _ := s.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 100}); len(l) != 11 {
		t.Errorf("the dry runs left %d backups of 11", len(l))
	}
	text, _, err := ctl.run("backups", "retention", "--owner", owner, "--schedule", "nightly")
	if err != nil || !strings.Contains(text, "3 kept, 7 to delete under last 0, daily 3, weekly 2") || !strings.Contains(text, "(dry run: nothing was deleted)") {
		t.Errorf("table: %v\n%s", err, text)
	}
	if _, stderr, err := ctl.run("backups", "retention", "--owner", owner, "--schedule", "weekly"); err == nil || !strings.Contains(stderr, "runs no schedule of that name") {
		t.Errorf("an unknown schedule: %v\n%s", err, stderr)
	}
	if _, stderr, err := ctl.run("backups", "retention", "--owner", owner); err == nil || !strings.Contains(stderr, "--keep-last") {
		t.Errorf("neither a schedule nor rules: %v\n%s", err, stderr)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestArchivectlChain: jobs start-export --since writes increments, backups
// list shows each one's base, restore of the newest increment restores its
// chain's snapshot in one job, backups synthesize writes that snapshot as
// a full backup that restores on its own, and a base an increment needs
// refuses to be deleted (FAILED_PRECONDITION, the base kept).
func TestArchivectlChain(t *testing.T) {
	bin := build(t)
	addr, s, _ := serveJobs(t, nil)
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	owner, copyOwner := storetest.Owner("chain"), storetest.Owner("chain")+"-copy"
	g := storetest.FullGroup("g")
	if _, err := s.PutGroup(t.Context(), owner, g); err != nil {
		t.Fatal(err)
	}
	newest := func() string {
		t.Helper()
		out, stderr, err := ctl.run("--json", "backups", "list", "--owner", owner)
		if err != nil {
			t.Fatalf("backups list: %v %s", err, stderr)
		}
		var list []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) == 0 {
			t.Fatalf("backups list --json: %v\n%s", err, out)
		}
		return list[0].ID
	}
	var ids []string
	for i := range 4 {
		// Each member adds 5 messages, the last sent before all others.
		msgs := storetest.Messages(fmt.Sprintf("m%d-", i), g.Id, 5, int64(1000*(4-i)))
		if _, err := s.AppendMessages(t.Context(), owner, msgs, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		args := []string{"jobs", "start-export", "--owner", owner, "--wait"}
		if i > 0 {
			args = append(args, "--since", ids[i-1])
		}
		if out, stderr, err := ctl.run(args...); err != nil || !strings.Contains(out, " 5 messages") {
			t.Fatalf("export %d: %v\n%s%s", i, err, out, stderr)
		}
		ids = append(ids, newest())
	}
	out, _, err := ctl.run("backups", "list", "--owner", owner)
	if err != nil || !strings.Contains(out, "KIND") || !strings.Contains(out, " full ") || strings.Count(out, " +") != 3 || !strings.Contains(out, "+"+ids[2]) {
		t.Fatalf("backups list shows no chain: %v\n%s", err, out)
	}
	// An increment restores as its chain's snapshot, in one import job;
	// --chain is still accepted.
	out, stderr, err := ctl.run("restore", "--owner", copyOwner, "--source-owner", owner, "--chain", ids[3])
	if err != nil || strings.Count(out, "import succeeded") != 1 {
		t.Fatalf("restore of an increment: %v\n%s%s", err, out, stderr)
	}
	page, err := s.ListMessages(t.Context(), copyOwner, store.MessageQuery{GroupID: g.Id, Limit: 100})
	if err != nil || len(page.Messages) != 20 {
		t.Fatalf("restored %d messages (%v), want 20", len(page.Messages), err)
	}
	// The same snapshot as one archive: a synthetic full, which restores
	// on its own.
	out, stderr, err = ctl.run("backups", "synthesize", "--owner", owner, ids[3])
	if err != nil || !strings.Contains(out, "20 messages") {
		t.Fatalf("backups synthesize: %v\n%s%s", err, out, stderr)
	}
	synthetic := newest()
	if out, _, _ := ctl.run("backups", "show", "--owner", owner, synthetic); !strings.Contains(out, "synthetic full of "+ids[3]) {
		t.Errorf("the synthetic full's label:\n%s", out)
	}
	synthCopy := copyOwner + "-synth"
	if out, stderr, err := ctl.run("restore", "--owner", synthCopy, "--source-owner", owner, synthetic); err != nil {
		t.Fatalf("restore of the synthetic full: %v\n%s%s", err, out, stderr)
	}
	if page, err := s.ListMessages(t.Context(), synthCopy, store.MessageQuery{GroupID: g.Id, Limit: 100}); err != nil || len(page.Messages) != 20 {
		t.Fatalf("the synthetic full restored %d messages (%v), want 20", len(page.Messages), err)
	}
	// Back to the full backup in replace mode: the copy holds exactly its
	// 5 messages again, the 15 later ones deleted.
	if out, stderr, err := ctl.run("restore", "--owner", copyOwner, "--source-owner", owner, "--replace", ids[0]); err != nil {
		t.Fatalf("restore --replace: %v\n%s%s", err, out, stderr)
	}
	if page, err := s.ListMessages(t.Context(), copyOwner, store.MessageQuery{GroupID: g.Id, Limit: 100}); err != nil || len(page.Messages) != 5 {
		t.Fatalf("after restore --replace of the full the owner holds %d messages (%v), want its 5", len(page.Messages), err)
	}
	_, stderr, err = ctl.run("backups", "delete", "--owner", owner, ids[2])
	if err == nil || !strings.Contains(stderr, "FailedPrecondition") || !strings.Contains(stderr, ids[3]) {
		t.Errorf("delete of a base: %v %s", err, stderr)
	}
	if _, stderr, err := ctl.run("backups", "show", "--owner", owner, ids[2]); err != nil {
		t.Errorf("the refused delete removed the base: %s", stderr)
	}
}

// TestArchivectlHoldsAndErasure (issue 37): holds set shows on backups
// list and holds list, refuses owners erase (naming the hold), and once
// released the erasure's dry run reports and the erasure removes the
// owner's backups and records; keys status reports the current KEK.
func TestArchivectlHoldsAndErasure(t *testing.T) {
	bin := build(t)
	addr, s, _ := serveJobs(t, nil)
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	owner := storetest.Owner("erased")
	g := storetest.FullGroup("g")
	if _, err := s.PutGroup(t.Context(), owner, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessages(t.Context(), owner, storetest.Messages("m", g.Id, 5, 1), store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := ctl.run("jobs", "start-export", "--owner", owner, "--wait"); err != nil {
		t.Fatalf("start-export: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err := ctl.run("holds", "set", "--owner", owner, "--reason", "case 41", "--for", "720h")
	if err != nil || !strings.Contains(out, "case 41") || !strings.Contains(out, "true") {
		t.Fatalf("holds set: %v\n%s%s", err, out, stderr)
	}
	if out, _, err := ctl.run("backups", "list", "--owner", owner); err != nil || !strings.Contains(out, "HOLD") || !strings.Contains(out, "case 41") {
		t.Fatalf("backups list shows no hold: %v\n%s", err, out)
	}
	if _, stderr, err := ctl.run("owners", "erase", "--owner", owner); err == nil || !strings.Contains(stderr, "legal hold") {
		t.Fatalf("owners erase under a hold: %v\n%s", err, stderr)
	}
	out, stderr, err = ctl.run("holds", "set", "--owner", owner, "--reason", "case 42")
	if err != nil || !strings.Contains(out, "case 42") {
		t.Fatalf("a second hold: %v\n%s%s", err, out, stderr)
	}
	second := strings.Fields(strings.Split(out, "\n")[1])[0]
	if _, stderr, err := ctl.run("holds", "release", "--owner", owner); err == nil || !strings.Contains(stderr, "hold_id") {
		t.Fatalf("holds release among two, naming neither: %v\n%s", err, stderr)
	}
	if out, stderr, err := ctl.run("holds", "release", "--owner", owner, "--hold", second); err != nil || !strings.Contains(out, "released") {
		t.Fatalf("holds release --hold: %v\n%s%s", err, out, stderr)
	}
	if out, stderr, err := ctl.run("holds", "list", "--owner", owner); err != nil || !strings.Contains(out, "case 41") || strings.Contains(out, "case 42") {
		t.Fatalf("holds list after releasing case 42: %v\n%s%s", err, out, stderr)
	}
	if out, stderr, err := ctl.run("holds", "release", "--owner", owner); err != nil || !strings.Contains(out, "released") {
		t.Fatalf("holds release: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err = ctl.run("owners", "erase", "--owner", owner, "--dry-run")
	if err != nil || !strings.Contains(out, "would erase") || !strings.Contains(out, "1 backups") || !strings.Contains(out, "messages        5 rows") {
		t.Fatalf("owners erase --dry-run: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err = ctl.run("owners", "erase", "--owner", owner)
	if err != nil || !strings.Contains(out, "erased: 1 backups") || !strings.Contains(out, "owner key destroyed: true") {
		t.Fatalf("owners erase: %v\n%s%s", err, out, stderr)
	}
	if l, _ := s.ListBackups(t.Context(), store.BackupQuery{Owner: owner, Limit: 10}); len(l) != 0 {
		t.Errorf("%d backups left after the erasure", len(l))
	}
	if gs, _ := s.ListGroups(t.Context(), owner, nil, 10); len(gs) != 0 {
		t.Errorf("%d groups left after the erasure", len(gs))
	}
	if !strings.Contains(out, "not complete yet") && !strings.Contains(out, "complete: readable by nothing the server holds") {
		t.Errorf("owners erase says nothing of the completion point:\n%s", out)
	}
	out, stderr, err = ctl.run("keys", "status")
	if err != nil || !strings.Contains(out, "current") || !strings.Contains(out, "can be removed") || !strings.Contains(out, "RETIRING KEK") {
		t.Fatalf("keys status: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err = ctl.run("owners", "erasures", "--owner", owner)
	if err != nil || !strings.Contains(out, "schedules skip the name") || strings.Count(out, "erase ") < 1 || !strings.Contains(out, "succeeded") {
		t.Fatalf("owners erasures: %v\n%s%s", err, out, stderr)
	}
	if _, stderr, err := ctl.run("owners", "reenable", "--owner", owner); err == nil || !strings.Contains(stderr, "--reason") {
		t.Fatalf("owners reenable without --reason: %v\n%s", err, stderr)
	}
	out, stderr, err = ctl.run("owners", "reenable", "--owner", owner, "--reason", "number reassigned")
	if err != nil || !strings.Contains(out, "re-enabled for schedules") || !strings.Contains(out, "number reassigned") {
		t.Fatalf("owners reenable: %v\n%s%s", err, out, stderr)
	}
}
