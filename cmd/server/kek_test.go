package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/keyring"
)

// TestBinaryRefusesAWrongKEK (issue 33, finding 5): once the catalog
// holds a backup, a server whose local KEK file is missing, replaced by
// another key, garbage or a directory does not start: it exits naming the
// file and the fingerprint the catalog expects, and makes no new KEK. The
// KEK put back, it starts and the backup restores.
func TestBinaryRefusesAWrongKEK(t *testing.T) {
	dataDir := t.TempDir()
	env := []string{"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR=" + dataDir, "AUTH_POLICY=" + jobPolicy(t)}
	srv := &jobServer{dataDir: dataDir, env: env}
	conn := srv.start(t)
	fillLarge(t, conn, "alice")
	done := waitJob(t, conn, startExport(t, conn, "alice", "local", "before").GetName())
	if done.GetError() != nil {
		t.Fatalf("export: %v", done.GetError())
	}
	srv.stop()

	path := filepath.Join(dataDir, "keys", keyring.KEKFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the local KEK: %v", err)
	}
	kek, err := keyring.Open(t.Context(), "", filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	fingerprint, err := kek.Fingerprint()
	kek.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		setup func() error
	}{
		{"missing", func() error { return nil }},
		{"replaced by another key", func() error { return os.WriteFile(path, bytes.Repeat([]byte{1}, 32), 0o600) }},
		{"garbage", func() error { return os.WriteFile(path, []byte("garbage\n"), 0o600) }},
		{"a directory", func() error { return os.Mkdir(path, 0o700) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.RemoveAll(path); err != nil {
				t.Fatal(err)
			}
			if err := c.setup(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			code, out := runIn(ctx, t, env)
			if ctx.Err() != nil {
				t.Fatalf("the server with its KEK %s kept running", c.name)
			}
			if code == 0 || !strings.Contains(out, path) || !strings.Contains(out, fingerprint) {
				t.Errorf("the server with its KEK %s: exit %d\n%s\nwant a refusal naming %s and fingerprint %s", c.name, code, out, path, fingerprint)
			}
			t.Logf("with the KEK %s: %s", c.name, strings.TrimSpace(out))
			if strings.Contains(out, `"msg":"serving"`) {
				t.Errorf("the server with its KEK %s served", c.name)
			}
			if c.name == "missing" {
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Errorf("a new KEK was made while the catalog holds wrapped keys: %v", err)
				}
			}
		})
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	conn = srv.start(t)
	bs := cb.NewBackupServiceClient(conn)
	list, err := bs.ListBackups(t.Context(), &cb.ListBackupsRequest{Owner: "alice"})
	if err != nil || len(list.GetBackups()) != 1 {
		t.Fatalf("backups after the KEK came back: %v, %v", list, err)
	}
	op, err := bs.StartImport(t.Context(), &cb.StartImportRequest{Owner: "carol", SourceOwner: "alice", Backup: list.GetBackups()[0].GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := waitJob(t, conn, op.GetName()); got.GetError() != nil {
		t.Fatalf("restore once the KEK is back: %v", got.GetError())
	}
}
