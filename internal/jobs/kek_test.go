package jobs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// localKEK opens the local KEK in dir, as a server without a key keeper.
func localKEK(t *testing.T, dir string) *keyring.KEK {
	t.Helper()
	k, err := keyring.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// TestKEKCheckedAgainstTheCatalog (issue 33, finding 5): each catalog row
// records which KEK wrapped it, and a server whose KEK is missing,
// replaced, garbage or a directory is refused by CheckKEK, naming the
// file and the fingerprint the catalog expects, rather than reading old
// backups as damaged and wrapping new ones under a second KEK. A backup
// under another KEK is "key unavailable", never damaged.
func TestKEKCheckedAgainstTheCatalog(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			keys := t.TempDir()
			path := filepath.Join(keys, keyring.KEKFile)
			h := newHarness(t, st, func(c *Config) { c.KEK = localKEK(t, keys) })
			// An empty catalog takes any KEK, even one not made yet.
			if err := h.m.Keys.CheckKEK(t.Context()); err != nil {
				t.Fatalf("empty catalog, no KEK yet: %v", err)
			}
			owner := storetest.Owner("o")
			fill(t, st, owner, 5)
			j, err := h.m.StartExport(t.Context(), "tester", exportReq(owner, "kek"))
			if err != nil {
				t.Fatal(err)
			}
			done := waitDone(t, h.m, j.ID)
			md, _ := Progress(done)
			bk, err := st.GetBackup(t.Context(), owner, md.GetBackup())
			if err != nil {
				t.Fatal(err)
			}
			want, err := h.m.cfg.KEK.Fingerprint()
			ok, kerr := st.GetOwnerKey(t.Context(), owner)
			if err != nil || kerr != nil || ok.KEKFingerprint != want || len(want) != 16 || bk.OwnerKeyID != ok.KeyID {
				t.Fatalf("the owner key row records KEK %q; the server's is %q (%v, %v); the backup names owner key %q of %q",
					ok.KEKFingerprint, want, err, kerr, bk.OwnerKeyID, ok.KeyID)
			}
			if err := h.m.Keys.CheckKEK(t.Context()); err != nil {
				t.Fatalf("the KEK that wrapped the catalog: %v", err)
			}
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			other := bytes.Repeat([]byte{0x42}, 32)
			for _, c := range []struct {
				name  string
				setup func()
			}{
				{"missing", func() { os.Remove(path) }},
				{"replaced by another key", func() { os.WriteFile(path, other, 0o600) }},
				{"garbage", func() { os.WriteFile(path, []byte("not a key\n"), 0o600) }},
				{"a directory", func() { os.Remove(path); os.Mkdir(path, 0o700) }},
			} {
				t.Run(c.name, func(t *testing.T) {
					os.RemoveAll(path)
					c.setup()
					defer func() { os.RemoveAll(path); os.WriteFile(path, good, 0o600) }()
					// A fresh server on the same catalog: the KEK is read
					// anew, as at a restart.
					m := New(Config{Store: st, KEK: localKEK(t, keys), Buckets: h.m.cfg.Buckets, Pool: h.m.cfg.Pool, Import: h.m.cfg.Import})
					err := m.Keys.CheckKEK(t.Context())
					if !errors.Is(err, ErrKEKMismatch) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
						t.Fatalf("CheckKEK with the KEK %s: %v; want ErrKEKMismatch naming %s and fingerprint %s", c.name, err, path, want)
					}
					if c.name == "missing" {
						if _, err := os.Stat(path); !os.IsNotExist(err) {
							t.Error("the check made a new KEK while the catalog holds wrapped keys")
						}
					}
					// The backup is intact: its key is unavailable here,
					// not damaged.
					if _, err := m.Catalog.BackupKey(t.Context(), "tester", owner, bk.ID); !errors.Is(err, ErrKeyUnavailable) || errors.Is(err, ErrBackupDamaged) {
						t.Errorf("the backup's key under the KEK %s: %v; want ErrKeyUnavailable", c.name, err)
					}
				})
			}
			// Restored, the KEK opens the backup again.
			if _, err := h.m.Catalog.BackupKey(t.Context(), "tester", owner, bk.ID); err != nil {
				t.Errorf("the backup's key once the KEK is back: %v", err)
			}
			// Rows written before fingerprints are checked by unwrapping.
			legacy := bk
			legacy.ID, legacy.JobID, legacy.KEKFingerprint, legacy.OwnerKeyID = NewID(bk.Created.Add(1)), "", "", ""
			if _, legacy.WrappedKey, err = h.m.cfg.KEK.NewDataKey(t.Context()); err != nil {
				t.Fatal(err)
			}
			legacy.State = store.BackupWriting
			if err := st.CreateBackup(t.Context(), legacy); err != nil {
				t.Fatal(err)
			}
			if err := h.m.Keys.CheckKEK(t.Context()); err != nil {
				t.Errorf("a legacy row that unwraps: %v", err)
			}
			// One legacy row is sampled: a catalog whose legacy rows were
			// wrapped under another KEK fails on it.
			if err := st.DeleteBackup(t.Context(), owner, legacy.ID); err != nil {
				t.Fatal(err)
			}
			legacy.ID, legacy.WrappedKey = NewID(bk.Created.Add(2)), bytes.Repeat([]byte{0xff}, len(legacy.WrappedKey))
			if err := st.CreateBackup(t.Context(), legacy); err != nil {
				t.Fatal(err)
			}
			if err := h.m.Keys.CheckKEK(t.Context()); !errors.Is(err, ErrKEKMismatch) {
				t.Errorf("a legacy row that does not unwrap: %v, want ErrKEKMismatch", err)
			}
		})
	}
}
