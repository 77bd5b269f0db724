package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryChecksBeforeItWrites: a port in use (gRPC, HTTP/JSON or
// metrics) or a schedule file that does not load stops the server before
// it makes its data directory, its database or a dev token (issue 36:
// it created all three, and migrated, before finding the port taken).
func TestBinaryChecksBeforeItWrites(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	badSchedule := filepath.Join(t.TempDir(), "schedule.yaml")
	if err := os.WriteFile(badSchedule, []byte("schedules: [{name: x, cron: 'not a cron'}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  []string
		want string
	}{
		{"gRPC port in use", []string{"LISTEN_ADDR=" + busy, "HTTP_LISTEN_ADDR=", "METRICS_ADDR="}, "listen on " + busy},
		{"HTTP port in use", []string{"LISTEN_ADDR=127.0.0.1:0", "HTTP_LISTEN_ADDR=" + busy, "METRICS_ADDR="}, "http: listen on " + busy},
		{"metrics port in use", []string{"LISTEN_ADDR=127.0.0.1:0", "HTTP_LISTEN_ADDR=", "METRICS_ADDR=" + busy}, "metrics: listen on " + busy},
		{"history port in use", []string{"LISTEN_ADDR=127.0.0.1:0", "HTTP_LISTEN_ADDR=", "METRICS_ADDR=", "HISTORY_LISTEN_ADDR=" + busy}, "history: listen on " + busy},
		{"history in plaintext off loopback", []string{"LISTEN_ADDR=127.0.0.1:0", "HTTP_LISTEN_ADDR=", "METRICS_ADDR=", "HISTORY_LISTEN_ADDR=0.0.0.0:0"}, "--history-listen 0.0.0.0:0: refusing to serve plaintext off loopback"},
		{"schedule that does not load", []string{"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "SCHEDULE=" + badSchedule}, "schedule"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			code, out := runIn(t.Context(), t, append([]string{"DATA_DIR=" + dataDir, "LOG_FORMAT=json"}, c.env...))
			if code == 0 {
				t.Fatalf("the server started; want it to stop:\n%s", out)
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("output does not say %q:\n%s", c.want, out)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("the data directory was made (%v) before the server stopped", err)
			}
		})
	}
}

// TestConsoleLogWarningsCarryNoStack: --log-format console prints a
// warning as one line, not followed by a 25-line stack (issue 36).
func TestConsoleLogWarningsCarryNoStack(t *testing.T) {
	var out bytes.Buffer
	log, err := newLogger("info", "console", &out)
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("a warning")
	log.Error("an error")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "a warning") || !strings.Contains(lines[1], "an error") {
		t.Fatalf("console log:\n%s", out.String())
	}
	if len(lines) == 2 {
		t.Errorf("an error carries no stack: the stack is for errors")
	}
}
