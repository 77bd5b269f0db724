// Package clients runs the example clients in other languages against the
// real server binary (issue 51, docs/clients.md): TypeScript (Connect-ES,
// over Connect on the HTTP listener and over gRPC) and Python (grpcio over
// gRPC), each doing a caller's first day. The clients report what they saw
// as JSON; this test holds it to what the server stored and has archivectl
// verify the archives they wrote.
package clients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/transport"
)

// key is the archives' key: the clients get it as hex, archivectl as a file.
var key = bytes.Repeat([]byte{0x5a}, 32)

// report is what a first-day script prints, one per transport.
type report struct {
	Transport        string  `json:"transport"`
	Owner            string  `json:"owner"`
	EncodedType      string  `json:"encodedType"`
	DecodedText      *string `json:"decodedText"`
	Appended         int     `json:"appended"`
	Streamed         int     `json:"streamed"`
	Archive          string  `json:"archive"`
	ExportedMessages *string `json:"exportedMessages"`
	Job              struct {
		Operation string  `json:"operation"`
		Backup    *string `json:"backup"`
		Messages  *string `json:"messages"`
	} `json:"job"`
	Unauthenticated refusal `json:"unauthenticated"`
	BadPageSize     refusal `json:"badPageSize"`
	Oversized       refusal `json:"oversized"`
	OversizedBytes  int     `json:"oversizedBytes"`
}

type refusal struct {
	Code      string `json:"code"`
	Reason    string `json:"reason"`
	Domain    string `json:"domain"`
	RequestID string `json:"requestId"`
	Field     string `json:"field"`
	Ms        int    `json:"ms"`
}

// codeIs compares gRPC code names as each language spells them:
// Connect-ES's ResourceExhausted, grpcio's RESOURCE_EXHAUSTED.
func codeIs(got, want string) bool {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	return norm(got) == norm(want)
}

// server is the built binary serving on loopback with its development
// token, as `go run ./cmd/server` does on a fresh machine.
type server struct {
	grpcAddr, httpAddr, token string
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func build(t *testing.T, root, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, "./"+pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serve starts the server binary on two free loopback ports and waits
// until both answer and the development token is written.
func serve(t *testing.T, bin string) server {
	t.Helper()
	dataDir := t.TempDir()
	s := server{grpcAddr: freeAddr(t), httpAddr: freeAddr(t)}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--data-dir", dataDir, "--listen", s.grpcAddr, "--http-listen", s.httpAddr, "--metrics-listen", "", "--log-level", "warn")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("server log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		token, err := os.ReadFile(filepath.Join(dataDir, "dev-token"))
		if err == nil && answers(s.grpcAddr) && answers(s.httpAddr) {
			s.token = strings.TrimSpace(string(token))
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not listen on %s and %s within a minute", s.grpcAddr, s.httpAddr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// clientEnv is the environment the first-day scripts read.
func clientEnv(s server, owner, out, grpcTarget string) []string {
	return append(os.Environ(),
		"CONTENTBACKUP_GRPC="+grpcTarget,
		"CONTENTBACKUP_HTTP=http://"+s.httpAddr,
		"CONTENTBACKUP_TOKEN="+s.token,
		"CONTENTBACKUP_OWNER="+owner,
		"CONTENTBACKUP_OUT="+out,
		"CONTENTBACKUP_KEY_HEX="+hex.EncodeToString(key),
	)
}

func run(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	started := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	t.Logf("%s %s: %s", filepath.Base(name), strings.Join(args, " "), time.Since(started).Round(10*time.Millisecond))
	return out
}

func reports(t *testing.T, out []byte) []report {
	t.Helper()
	var rs []report
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r report
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a report line: %v\n%s", err, sc.Bytes())
		}
		rs = append(rs, r)
	}
	return rs
}

// check holds one transport's first day to what a caller must get:
// content round-trips, every message stored comes back on the stream, in
// the archive and in the job's result, and each refusal is a status with
// its code and details (an oversized request too, before its deadline).
func check(t *testing.T, archivectl string, r report, text string) {
	t.Helper()
	t.Run(r.Transport, func(t *testing.T) {
		if r.EncodedType != "xmtp.org/text:1.0" || r.DecodedText == nil || *r.DecodedText != text {
			t.Errorf("Encode then Decode: type %q, text %v; want %q", r.EncodedType, r.DecodedText, text)
		}
		if r.Appended != 3 || r.Streamed != 3 {
			t.Errorf("3 messages appended: %d inserted, %d streamed back", r.Appended, r.Streamed)
		}
		if r.ExportedMessages == nil || *r.ExportedMessages != "3" {
			t.Errorf("Export summary: %v messages, want 3", r.ExportedMessages)
		}
		if r.Job.Backup == nil || *r.Job.Backup == "" || r.Job.Messages == nil || *r.Job.Messages != "3" || !strings.HasPrefix(r.Job.Operation, "operations/") {
			t.Errorf("StartExport then WaitOperation: %+v; want a backup of 3 messages", r.Job)
		}
		if u := r.Unauthenticated; !codeIs(u.Code, "UNAUTHENTICATED") || u.Reason != "UNAUTHENTICATED" || u.Domain != "contentbackup.v1" || u.RequestID == "" {
			t.Errorf("a call without a token: %+v; want UNAUTHENTICATED with its ErrorInfo and RequestInfo", u)
		}
		if b := r.BadPageSize; !codeIs(b.Code, "INVALID_ARGUMENT") || b.Field != "page_size" {
			t.Errorf("page_size 5000: %+v; want INVALID_ARGUMENT with a BadRequest naming page_size", b)
		}
		// The deadline was 20 s: RESOURCE_EXHAUSTED, not DEADLINE_EXCEEDED,
		// is the proof it was answered before it.
		if o := r.Oversized; !codeIs(o.Code, "RESOURCE_EXHAUSTED") || r.OversizedBytes <= 32<<20 {
			t.Errorf("a %d-byte request: %+v; want RESOURCE_EXHAUSTED before the deadline", r.OversizedBytes, o)
		}
		keyFile := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(keyFile, key, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(archivectl, "verify", r.Archive, "--key-file", keyFile).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "3 messages") || !strings.Contains(string(out), "complete:") {
			t.Errorf("archivectl verify %s: %v\n%s", r.Archive, err, out)
		}
	})
}

type binaries struct{ server, archivectl string }

func buildBinaries(t *testing.T) binaries {
	t.Helper()
	root, dir := repoRoot(t), t.TempDir()
	return binaries{server: build(t, root, dir, "cmd/server"), archivectl: build(t, root, dir, "cmd/archivectl")}
}

// TestTypeScriptFirstDay (issue 51): clients/typescript type-checks
// (tsc, so an enum or a 64-bit field of the wrong type fails here) and
// does a first day over Connect and over gRPC.
func TestTypeScriptFirstDay(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required for the TypeScript client: %v (make test puts the pinned Node on PATH)", err)
	}
	dir := filepath.Join(repoRoot(t), "clients", "typescript")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@connectrpc", "connect-node")); err != nil {
		t.Fatalf("the TypeScript client's packages are not installed; run `make client-deps` (npm ci in clients/typescript): %v", err)
	}
	bins := buildBinaries(t)
	s := serve(t, bins.server)
	run(t, dir, os.Environ(), node, "node_modules/typescript/bin/tsc", "--noEmit", "-p", ".")
	out := run(t, dir, clientEnv(s, "ts", t.TempDir(), "http://"+s.grpcAddr), node, "--experimental-transform-types", "--no-warnings", "src/first_day.ts")
	rs := reports(t, out)
	if len(rs) != 2 {
		t.Fatalf("%d reports, want one for Connect and one for gRPC:\n%s", len(rs), out)
	}
	for _, r := range rs {
		check(t, bins.archivectl, r, "Hello from "+r.Transport)
	}
}

// debianPython is the interpreter Debian's python3-grpcio is installed
// for, rather than whichever python3 comes first on PATH.
func debianPython(t *testing.T) string {
	t.Helper()
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if exec.Command(p, "-c", "import grpc, google.protobuf").Run() == nil {
			return p
		}
	}
	t.Fatalf("no python3 imports grpc and protobuf: apt-get install python3-grpcio python3-protobuf")
	return ""
}

// TestPythonFirstDay (issue 51): stubs made by protoc
// (clients/python/generate.sh), then a first day over gRPC with grpcio.
func TestPythonFirstDay(t *testing.T) {
	python := debianPython(t)
	for _, tool := range []string{"protoc", "grpc_python_plugin"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required for the Python client: apt-get install protobuf-compiler protobuf-compiler-grpc", tool)
		}
	}
	root := repoRoot(t)
	stubs := t.TempDir()
	run(t, root, os.Environ(), "bash", "clients/python/generate.sh", stubs)
	bins := buildBinaries(t)
	s := serve(t, bins.server)
	env := append(clientEnv(s, "py", t.TempDir(), s.grpcAddr), "PYTHONPATH="+stubs)
	out := run(t, root, env, python, "clients/python/first_day.py")
	rs := reports(t, out)
	if len(rs) != 1 {
		t.Fatalf("%d reports, want 1:\n%s", len(rs), out)
	}
	check(t, bins.archivectl, rs[0], "Hello from Python")
}

// TestServiceConfigIsTheGoClients: api/service_config.json, the retry
// policy clients in other languages load, is the one archivectl dials
// with (transport.RetryServiceConfig).
func TestServiceConfigIsTheGoClients(t *testing.T) {
	file, err := os.ReadFile(filepath.Join(repoRoot(t), "api", "service_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(file, &got); err != nil {
		t.Fatalf("api/service_config.json: %v", err)
	}
	if err := json.Unmarshal([]byte(transport.RetryServiceConfig), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("api/service_config.json differs from transport.RetryServiceConfig; copy it over:\n%s", transport.RetryServiceConfig)
	}
}
