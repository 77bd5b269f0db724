package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestBinary builds the server, starts it the way the README does (with
// the listen address from the environment), calls it, and stops it with
// SIGTERM, which must end it cleanly; its metrics count the call.
func TestBinary(t *testing.T) {
	bin := buildServer(t)
	dataDir := t.TempDir()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=127.0.0.1:0", "LOG_FORMAT=json", "DATA_DIR="+dataDir)
	// An io.Pipe rather than StderrPipe: Wait then returns only after every
	// line the server wrote has been handed to the reader.
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	addr := make(chan string, 1)
	metricsAddr := make(chan string, 1)
	var logs []string
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			logs = append(logs, line)
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil {
				switch entry.Msg {
				case "serving":
					addr <- entry.Addr
				case "serving metrics":
					metricsAddr <- entry.Addr
				}
			}
		}
	}()
	var target string
	select {
	case target = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatal("server did not log its address")
	}

	// Health answers without credentials; nothing else does.
	anon, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := healthpb.NewHealthClient(anon).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
	_, err = cb.NewContentServiceClient(anon).Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: "hi"}}}})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Encode without a token: %v; want UNAUTHENTICATED", err)
	}

	// With nothing configured on loopback, the server keeps a development
	// operator token in the data directory, readable by its owner only.
	tokenPath := filepath.Join(dataDir, "dev-token")
	if fi, err := os.Stat(tokenPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev token file: %v %v", fi, err)
	}
	conn := dialToken(t, target, tokenPath)
	enc, err := cb.NewContentServiceClient(conn).Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: "hi"}}}})
	if err != nil || enc.GetContentType() != "xmtp.org/text:1.0" {
		t.Fatalf("encode: %v %v", enc, err)
	}

	// The default store is the embedded one: ConversationService works
	// with nothing configured.
	conv := cb.NewConversationServiceClient(conn)
	group := &gb.GroupSave{Id: storetest.GroupID("g"), MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED, ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM,
		DmId: &storetest.DMID}
	if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: "o", Group: group}); err != nil {
		t.Fatalf("PutGroup on the embedded store: %v", err)
	}

	maddr := <-metricsAddr
	if got := scrape(t, "http://"+maddr+"/readyz"); got != "ok\n" {
		t.Errorf("/readyz: %q", got)
	}
	if got := scrape(t, "http://"+maddr+"/livez"); got != "ok\n" {
		t.Errorf("/livez: %q", got)
	}
	metrics := scrape(t, "http://"+maddr+"/metrics")
	if !strings.Contains(metrics, `grpc_server_handled_total{grpc_code="OK",grpc_method="Encode",grpc_service="contentbackup.v1.ContentService",grpc_type="unary"} 1`) {
		t.Errorf("metrics do not count the Encode call:\n%s", metrics)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	pw.Close()
	<-logsDone
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, strings.Join(logs, "\n"))
	}
	all := strings.Join(logs, "\n")
	if !strings.Contains(all, "shutting down") {
		t.Errorf("no graceful shutdown logged:\n%s", all)
	}
	token, _ := os.ReadFile(tokenPath)
	if strings.Contains(all, strings.TrimSpace(string(token))) {
		t.Errorf("the development token was logged:\n%s", all)
	}
}

// dialToken connects over plaintext (a loopback server) with the bearer
// token in tokenFile.
func dialToken(t *testing.T, target, tokenFile string) *grpc.ClientConn {
	t.Helper()
	token, err := transport.ReadToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := transport.DialOptions(transport.ClientOptions{Insecure: true, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

func TestVersionFlag(t *testing.T) {
	out, err := exec.Command(buildServer(t), "--version").Output()
	if err != nil || strings.TrimSpace(string(out)) != testVersion {
		t.Errorf("--version: %q %v; want the version the build was given, %s", out, err, testVersion)
	}
}

// TestBinaryPostgres runs the migrate command against a new Postgres
// database, then serves from it with --no-migrate; without the migration
// the server refuses to start rather than serve a schema it does not know.
func TestBinaryPostgres(t *testing.T) {
	dbURL := storetest.NewPostgresDatabase(t)
	dataDir := t.TempDir()
	env := []string{"DATABASE_URL=" + dbURL, "LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR=" + dataDir}

	code, out := runIn(t.Context(), t, env, "--no-migrate")
	if code == 0 || !strings.Contains(out, "run the migrate command") {
		t.Fatalf("serve on an unmigrated database: exit %d\n%s", code, out)
	}
	code, out = runIn(t.Context(), t, env, "migrate")
	if code != 0 {
		t.Fatalf("migrate: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "postgres://") {
		t.Errorf("the database URL (which may hold a password) was logged:\n%s", out)
	}

	srv := serveIn(t, append(env, "MIGRATE=false")...)
	conv := cb.NewConversationServiceClient(dialToken(t, srv.addr, filepath.Join(dataDir, "dev-token")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	group := storetest.FullGroup("g")
	if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: "o", Group: group}); err != nil {
		t.Fatalf("PutGroup on Postgres: %v", err)
	}
	got, err := conv.GetGroup(ctx, &cb.GetGroupRequest{Owner: "o", GroupId: group.Id})
	if err != nil || !proto.Equal(got.GetGroup(), group) {
		t.Fatalf("GetGroup on Postgres: %v, %v", got, err)
	}
}

// startBinary starts the built server with env and returns the address it
// logged, and a function returning what it logged so far. It is killed
// when the test ends.
func startBinary(t *testing.T, bin string, env ...string) (addr string, logs func() string, proc *os.Process) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	var buf syncBuffer
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); pw.Close() })
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			buf.Write(append(sc.Bytes(), '\n'))
			var entry struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &entry) == nil && entry.Msg == "serving" {
				addrc <- entry.Addr
			}
		}
	}()
	select {
	case addr = <-addrc:
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not log its address:\n%s", buf.String())
	}
	return addr, buf.String, cmd.Process
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testVersion is the version the tests' build is given, as make build
// gives one (-X main.buildVersion).
const testVersion = "v9.9.9-test"

// buildServer returns the server binary, built once for every test of
// the package that needs a process of its own (a signal, a kill, its
// RSS); the rest run it in their process (inprocess_test.go).
func buildServer(t *testing.T) string {
	t.Helper()
	builds.once.Do(func() {
		dir, err := os.MkdirTemp("", "server-test")
		if err != nil {
			builds.err = err
			return
		}
		builds.dir = dir
		builds.bin = filepath.Join(dir, "server")
		builds.out, builds.err = exec.Command("go", "build", "-ldflags", "-X main.buildVersion="+testVersion, "-o", builds.bin, ".").CombinedOutput()
	})
	if builds.err != nil {
		t.Fatalf("build: %v\n%s", builds.err, builds.out)
	}
	return builds.bin
}

var builds struct {
	once sync.Once
	dir  string
	bin  string
	out  []byte
	err  error
}

func TestMain(m *testing.M) {
	for k, v := range awsEnv {
		os.Setenv(k, v)
	}
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// TestBinaryRefusesAnOpenPerimeter: on an address other than loopback the
// server will not serve plaintext without --insecure, nor without an
// authentication source; with --insecure it warns.
func TestBinaryRefusesAnOpenPerimeter(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("principals: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"LISTEN_ADDR=0.0.0.0:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR=" + t.TempDir()}
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"plaintext":         {[]string{"AUTH_POLICY=" + policy}, "refusing to serve plaintext"},
		"no authentication": {[]string{"INSECURE=true"}, "no authentication configured"},
		"client CA alone":   {[]string{"AUTH_POLICY=" + policy, "TLS_CLIENT_CA=" + policy}, "--tls-client-ca needs --tls-cert"},
	} {
		code, out := runIn(t.Context(), t, append(base, tc.env...))
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d\n%s", name, code, out)
		}
	}
	srv := serveIn(t, append(base, "AUTH_POLICY="+policy, "INSECURE=true")...)
	if !strings.Contains(srv.logs(), "PLAINTEXT") {
		t.Errorf("no warning for plaintext on a non-loopback address:\n%s", srv.logs())
	}
}

// TestComposeSetup runs deploy/compose/setup.sh into a directory and
// serves the way docker-compose.yaml configures the server (TLS, mutual
// TLS verified if given, the policy, the page token key): the token it
// made and the client certificate it made both prove the operator, and
// a SIGHUP reloads the policy, revoking the token.
func TestComposeSetup(t *testing.T) {
	bin := buildServer(t)
	out := t.TempDir()
	setup := exec.Command("bash", "../../deploy/compose/setup.sh")
	setup.Env = append(os.Environ(), "OUT="+out)
	if b, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("setup.sh: %v\n%s", err, b)
	}
	policy := filepath.Join(out, "policy.yaml")
	addr, logs, proc := startBinary(t, bin,
		"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR="+t.TempDir(),
		"TLS_CERT="+filepath.Join(out, "tls/server.crt"), "TLS_KEY="+filepath.Join(out, "tls/server.key"),
		"TLS_CLIENT_CA="+filepath.Join(out, "tls/ca.crt"), "AUTH_POLICY="+policy, "AUTH_POLICY_REFRESH=1h",
		"PAGE_TOKEN_KEY_FILE="+filepath.Join(out, "page-token.key"))
	token, err := transport.ReadToken(filepath.Join(out, "token"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	call := func(o transport.ClientOptions) error {
		o.CAFile, o.ServerName = filepath.Join(out, "tls/ca.crt"), "localhost"
		opts, err := transport.DialOptions(o)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = cb.NewConversationServiceClient(conn).ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice"})
		return err
	}
	if err := call(transport.ClientOptions{Token: token}); err != nil {
		t.Errorf("the setup's token: %v", err)
	}
	if err := call(transport.ClientOptions{CertFile: filepath.Join(out, "tls/client.crt"), KeyFile: filepath.Join(out, "tls/client.key")}); err != nil {
		t.Errorf("the setup's client certificate: %v", err)
	}
	if code := status.Code(call(transport.ClientOptions{})); code != codes.Unauthenticated {
		t.Errorf("no credential: %v", code)
	}

	// Revoke the token: an empty policy, then SIGHUP (the refresh is an
	// hour, so only the signal can have reloaded it).
	if err := os.WriteFile(policy, []byte("principals: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, func() bool {
		return status.Code(call(transport.ClientOptions{Token: token})) == codes.Unauthenticated
	}, func() string { return "the token still works after SIGHUP:\n" + logs() })
	if strings.Contains(logs(), token) {
		t.Errorf("the token was logged")
	}
}

// TestProfilesOnlyWhenAsked: Go's profiles are served on the metrics
// address with --pprof, and not without it.
func TestProfilesOnlyWhenAsked(t *testing.T) {
	for _, profiles := range []bool{false, true} {
		rec := httptest.NewRecorder()
		metricsMux(prometheus.NewRegistry(), nil, nil, profiles).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
		want := http.StatusNotFound
		if profiles {
			want = http.StatusOK
		}
		if rec.Code != want {
			t.Errorf("--pprof=%v: /debug/pprof/ answered %d, want %d", profiles, rec.Code, want)
		}
	}
}

// TestCheckPolicy: server --check-policy validates a file as a reload
// would and exits, naming the principals no credential proves (revoked).
func TestCheckPolicy(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("principals:\n  - {name: ops, tokens_sha256: ["+auth.TokenDigest("t-0123456789")+"], scopes: [admin], owners: [\"*\"]}\n  - {name: alice, tokens_sha256: [], scopes: [content], owners: [alice]}\n"), 0o600)
	os.WriteFile(bad, []byte("principals:\n  - {name: x, tokens_sha256: [], scopes: [root], owners: [x]}\n"), 0o600)
	code, out := runIn(t.Context(), t, nil, "--check-policy", good)
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(out, "[alice]") {
		t.Errorf("--check-policy of a good file: exit %d\n%s", code, out)
	}
	code, out = runIn(t.Context(), t, nil, "--check-policy", bad)
	if code == 0 || !strings.Contains(out, "unknown scope") {
		t.Errorf("--check-policy of a bad file: exit %d\n%s", code, out)
	}
}
