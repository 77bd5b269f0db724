package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

// The server's tests run it as main does, in their own process: run with
// the arguments the environment they name would give, output into a
// buffer, ctx for the signal. Only what needs a process of its own (a
// signal, a kill, its RSS, its build) builds the binary (main_test.go).

// argsOf turns a server environment (LISTEN_ADDR=...) into the flags it
// sets for command ("" is serve, the default): kong reads the environment
// of the process, which tests running side by side share. As with the
// environment, a variable of another command's flag is ignored; one that
// sets no flag is a test's mistake, but for the cloud SDKs' (AWS_*), which
// TestMain sets for the process.
func argsOf(t testing.TB, command string, env []string) []string {
	t.Helper()
	var c cli
	parser, err := kong.New(&c, parserOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if command == "" {
		command = "serve"
	}
	mine, others := map[string]string{}, map[string]bool{}
	for _, node := range parser.Model.Children {
		for _, group := range node.AllFlags(false) {
			for _, fl := range group {
				for _, e := range fl.Envs {
					if node.Name == command {
						mine[e] = fl.Name
					} else {
						others[e] = true
					}
				}
			}
		}
	}
	var args []string
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		flag, ok := mine[name]
		switch {
		case ok:
			args = append(args, "--"+flag+"="+value)
		case others[name]:
		case strings.HasPrefix(name, "AWS_"):
			if got := awsEnv[name]; got != value {
				t.Fatalf("%s=%s: the in-process server shares the test process's %s=%s", name, value, name, got)
			}
		default:
			t.Fatalf("%s sets no flag of the server", name)
		}
	}
	return args
}

// runIn runs the server in this process with env and args until it
// returns, or ctx ends: its exit code and everything it wrote.
func runIn(ctx context.Context, t testing.TB, env []string, args ...string) (int, string) {
	t.Helper()
	var out syncBuffer
	command := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		command = args[0]
	}
	code := run(ctx, append(args, argsOf(t, command, env)...), console{stdout: &out, stderr: &out})
	return code, out.String()
}

// served is a server running in this process.
type served struct {
	addr    string
	logs    func() string
	cancel  context.CancelFunc
	done    chan int
	stopped bool
}

// serveIn starts the server in this process with env and returns once it
// logs that it serves. It is stopped (as by SIGTERM) when the test ends.
func serveIn(t testing.TB, env ...string) *served {
	t.Helper()
	return serveInWith(t, nil, env...)
}

// serveInWith is serveIn with adjust applied to the flags (runWith).
func serveInWith(t testing.TB, adjust func(*cli), env ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	s := &served{logs: out.String, cancel: cancel, done: make(chan int, 1)}
	args := argsOf(t, "", env)
	go func() { s.done <- runWith(ctx, args, console{stdout: &out, stderr: &out}, adjust) }()
	t.Cleanup(func() { _ = s.stop() })
	deadline := time.After(60 * time.Second)
	for {
		for _, line := range strings.Split(out.String(), "\n") {
			var entry struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "serving" {
				s.addr = entry.Addr
				return s
			}
		}
		select {
		case code := <-s.done:
			s.stopped = true
			t.Fatalf("the server exited (%d) before it served:\n%s", code, out.String())
		case <-deadline:
			t.Fatalf("the server did not log its address:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop ends the server as SIGTERM does and returns its exit code.
func (s *served) stop() int {
	if s.stopped {
		return 0
	}
	s.stopped = true
	s.cancel()
	return <-s.done
}

// awsEnv is the cloud SDK's environment of every server the tests run,
// set for the test process by TestMain: a server run in it reads the
// process's environment.
var awsEnv = map[string]string{
	"AWS_ACCESS_KEY_ID": s3Access, "AWS_SECRET_ACCESS_KEY": s3Secret, "AWS_REGION": "us-east-1",
	"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
}
