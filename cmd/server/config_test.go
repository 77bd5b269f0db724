package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

// parseServe parses args as the binary does, with the config loader.
func parseServe(t *testing.T, args ...string) (cli, error) {
	t.Helper()
	var c cli
	parser, err := kong.New(&c, append(parserOptions(), kong.Configuration(configFile(serveFlagNames())), kong.Exit(func(int) {}))...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = parser.Parse(args)
	return c, err
}

// TestConfigFile (issue 48): serve --config reads the long tail of flags
// from a JSON file, with "-" or "_" in their names; the command line and
// the environment win over it; a key that names no flag is an error
// naming it, never a setting silently ignored.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "config.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := write(`{"max-archive-streams": 32, "job_lease": "45s", "log-level": "warn"}`)
	c, err := parseServe(t, "serve", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Serve.MaxArchiveStreams != 32 || c.Serve.JobLease != 45*time.Second || c.Serve.LogLevel != "warn" {
		t.Errorf("from the file: streams %d, lease %s, log level %s; want 32, 45s, warn", c.Serve.MaxArchiveStreams, c.Serve.JobLease, c.Serve.LogLevel)
	}
	if c.Serve.MaxStreamsPerOwner != 2 {
		t.Errorf("a flag the file leaves out: %d, want its default 2", c.Serve.MaxStreamsPerOwner)
	}
	c, err = parseServe(t, "serve", "--config", path, "--max-archive-streams", "8")
	if err != nil || c.Serve.MaxArchiveStreams != 8 {
		t.Errorf("the command line over the file: %d (%v), want 8", c.Serve.MaxArchiveStreams, err)
	}
	t.Setenv("LOG_LEVEL", "error")
	c, err = parseServe(t, "serve", "--config", path)
	if err != nil || c.Serve.LogLevel != "error" {
		t.Errorf("the environment over the file: %s (%v), want error", c.Serve.LogLevel, err)
	}
	_, err = parseServe(t, "serve", "--config", write(`{"max-archive-stream": 32, "listen": "127.0.0.1:0"}`))
	if err == nil || !strings.Contains(err.Error(), "max-archive-stream: no such flag") {
		t.Errorf("a misspelled key: %v, want an error naming it", err)
	}
	if _, err := parseServe(t, "serve", "--config", write(`[1, 2]`)); err == nil {
		t.Error("a file that is not an object of flags was accepted")
	}
}
