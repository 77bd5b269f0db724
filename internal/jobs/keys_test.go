package jobs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// stopAfter cancels a rotation after n rewraps, as a crash would stop it.
type stopAfter struct {
	store.Store
	n      atomic.Int32
	cancel context.CancelFunc
}

func (s *stopAfter) RewrapOwnerKey(ctx context.Context, old store.OwnerKey, wrapped []byte, kek string, at time.Time) error {
	if s.n.Add(-1) < 0 {
		s.cancel()
		return ctx.Err()
	}
	return s.Store.RewrapOwnerKey(ctx, old, wrapped, kek, at)
}

// TestKEKRotation (issue 37): with a new KEK current and the old one
// retiring, the key worker rewraps every owner key under the new one
// while exports and imports run (none fails); only key rows change (every
// object byte and every backup row's sealed key stay as they were); a
// rotation stopped part-way resumes; the key status shows the rows left
// under the retiring KEK until none is; then the old KEK is removed from
// the keeper and every backup still restores. A server holding neither
// is refused at start while rows remain under the old one.
func TestKEKRotation(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			ctx := t.Context()
			keys := t.TempDir()
			h := newHarness(t, st, func(c *Config) { c.KEK = localKEK(t, keys) })
			var owners []string
			var backups []string
			for i := range 12 {
				owner := storetest.Owner(string(rune('a' + i)))
				fill(t, st, owner, 2)
				owners = append(owners, owner)
				backups = append(backups, exportDone(t, h, exportReq(owner, "before")).GetBackup())
			}
			rowsBefore := map[string][]byte{}
			for i, owner := range owners {
				b, err := st.GetBackup(ctx, owner, backups[i])
				if err != nil {
					t.Fatal(err)
				}
				rowsBefore[owner] = b.WrappedKey
			}
			objectsBefore := files(t, h.dir)
			oldFP, _ := h.m.cfg.KEK.Fingerprint()

			// The operator's rotation: the old key file kept aside as
			// retiring, a new one made in its place.
			old := filepath.Join(keys, "kek-retiring.key")
			if err := os.Rename(filepath.Join(keys, keyring.KEKFile), old); err != nil {
				t.Fatal(err)
			}
			retiring, err := keyring.OpenRetiring(ctx, old)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { retiring.Close() })
			cut, cancel := context.WithCancel(ctx)
			stopped := &stopAfter{Store: st, cancel: cancel}
			stopped.n.Store(5)
			rot := newHarness(t, stopped, func(c *Config) {
				c.KEK, c.RetiringKEKs, c.Buckets = localKEK(t, keys), []*keyring.KEK{retiring}, h.m.cfg.Buckets
			})
			if _, _, err := rot.m.cfg.KEK.NewDataKey(ctx); err != nil { // the new local KEK, made
				t.Fatal(err)
			}
			if err := rot.m.Keys.CheckKEK(ctx); err != nil {
				t.Fatalf("CheckKEK with the old KEK retiring: %v", err)
			}
			newFP, _ := rot.m.cfg.KEK.Fingerprint()
			if newFP == oldFP {
				t.Fatal("the new KEK has the old one's fingerprint")
			}

			// Jobs run through the rotation.
			var wg sync.WaitGroup
			var failed atomic.Int32
			for i, owner := range owners[:4] {
				wg.Add(2)
				go func() {
					defer wg.Done()
					j, err := rot.m.StartExport(ctx, "tester", exportReq(owner, "during"))
					if err != nil || waitDone(t, rot.m, j.ID).State != store.JobSucceeded {
						failed.Add(1)
					}
				}()
				go func() {
					defer wg.Done()
					j, err := rot.m.StartImport(ctx, "tester", ImportRequest{Owner: storetest.Owner("copy-" + owner), SourceOwner: owner, Backup: backups[i]})
					if err != nil || waitDone(t, rot.m, j.ID).State != store.JobSucceeded {
						failed.Add(1)
					}
				}()
			}
			pass, err := rot.m.Keys.MaintainKeys(cut, nil)
			if !errors.Is(err, context.Canceled) || pass.Rotated != 5 {
				t.Fatalf("the cut-short pass: %+v, %v; want 5 rotated, then cancelled", pass, err)
			}
			mid, err := rot.m.Keys.KeyStatus(ctx)
			if err != nil || mid.Retired() != int64(len(owners)-5) {
				t.Fatalf("mid-rotation status: %+v, %v; want %d rows still retiring", mid, err, len(owners)-5)
			}
			stopped.n.Store(1 << 20)
			pass, err = rot.m.Keys.MaintainKeys(ctx, nil)
			if err != nil || pass.Rotated != len(owners)-5 || pass.Failed != 0 {
				t.Fatalf("the resumed pass: %+v, %v", pass, err)
			}
			wg.Wait()
			if failed.Load() != 0 {
				t.Fatalf("%d jobs failed during the rotation", failed.Load())
			}
			done, err := rot.m.Keys.KeyStatus(ctx)
			if err != nil || done.Retired() != 0 || done.Current != newFP || done.KEKs[0].OwnerKeys != int64(len(owners)) {
				t.Fatalf("after the rotation: %+v, %v", done, err)
			}
			for i, owner := range owners {
				b, err := st.GetBackup(ctx, owner, backups[i])
				if err != nil || string(b.WrappedKey) != string(rowsBefore[owner]) {
					t.Fatalf("backup %s's row changed in the rotation (%v)", b.ID, err)
				}
			}
			if got := files(t, h.dir); len(got) < len(objectsBefore) {
				t.Fatalf("objects went in the rotation")
			}

			// The old KEK gone from the keeper: every backup restores.
			if err := os.Remove(old); err != nil {
				t.Fatal(err)
			}
			after := newHarness(t, st, func(c *Config) { c.KEK, c.Buckets = localKEK(t, keys), h.m.cfg.Buckets })
			if err := after.m.Keys.CheckKEK(ctx); err != nil {
				t.Fatalf("CheckKEK after the old KEK's removal: %v", err)
			}
			for i, owner := range owners {
				importDone(t, after, storetest.Owner("after-"+owner), owner, backups[i])
			}
		})
	}
}

// TestKEKRemovedTooSoon (issue 37): a server whose catalog still holds
// owner keys under a KEK it does not hold is refused at start, naming the
// fingerprint; rows under a retiring KEK are reported by the key status.
func TestKEKRemovedTooSoon(t *testing.T) {
	st := enginetest.SQLite(t)
	ctx := t.Context()
	keys := t.TempDir()
	h := newHarness(t, st, func(c *Config) { c.KEK = localKEK(t, keys) })
	owner := storetest.Owner("o")
	fill(t, st, owner, 2)
	exportDone(t, h, exportReq(owner, "x"))
	oldFP, _ := h.m.cfg.KEK.Fingerprint()
	if err := os.Rename(filepath.Join(keys, keyring.KEKFile), filepath.Join(keys, "gone.key")); err != nil {
		t.Fatal(err)
	}
	fresh := newHarness(t, st, func(c *Config) { c.KEK = localKEK(t, keys) })
	if _, _, err := fresh.m.cfg.KEK.NewDataKey(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fresh.m.Keys.CheckKEK(ctx); !errors.Is(err, ErrKEKMismatch) || !strings.Contains(err.Error(), oldFP) || !strings.Contains(err.Error(), "--job-key-retiring") {
		t.Fatalf("CheckKEK without the old KEK: %v", err)
	}
	st2, err := fresh.m.Keys.KeyStatus(ctx)
	if err != nil || st2.Retired() != 1 || st2.KEKs[len(st2.KEKs)-1].State != "unavailable" {
		t.Fatalf("key status: %+v, %v", st2, err)
	}
}

// TestLegacyBackupsMoveToOwnerKeys (issue 37): a backup written before
// owner keys (its data key wrapped by the KEK itself) is resealed under
// its owner's key by the key worker, once however many replicas run it,
// and restores as before; its object is not rewritten.
func TestLegacyBackupsMoveToOwnerKeys(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			ctx := t.Context()
			h := newHarness(t, st)
			owner := storetest.Owner("legacy")
			fill(t, st, owner, 3)
			id := exportDone(t, h, exportReq(owner, "old")).GetBackup()
			b, err := st.GetBackup(ctx, owner, id)
			if err != nil {
				t.Fatal(err)
			}
			key, err := h.m.Keys.unwrap(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			// The row as a server before owner keys wrote it.
			legacy := b
			legacy.OwnerKeyID, legacy.KEKFingerprint = "", ""
			if legacy.WrappedKey, err = h.m.cfg.KEK.Wrap(ctx, key); err != nil {
				t.Fatal(err)
			}
			if err := st.DeleteBackup(ctx, owner, id); err != nil {
				t.Fatal(err)
			}
			if err := st.CreateBackup(ctx, legacy); err != nil {
				t.Fatal(err)
			}
			if got, err := h.m.Catalog.BackupKey(ctx, "tester", owner, id); err != nil || string(got) != string(key) {
				t.Fatalf("the legacy row opens under the KEK: %v", err)
			}
			status, _ := h.m.Keys.KeyStatus(ctx)
			if status.KEKs[0].LegacyBackups != 1 {
				t.Fatalf("key status before the migration: %+v", status)
			}
			other := newHarness(t, st, func(c *Config) { c.KEK, c.Buckets = h.m.cfg.KEK, h.m.cfg.Buckets })
			var wg sync.WaitGroup
			var migrated atomic.Int32
			for _, m := range []*Manager{h.m, other.m} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := m.Keys.MaintainKeys(ctx, nil)
					if err != nil || p.Failed != 0 {
						t.Errorf("MaintainKeys: %+v, %v", p, err)
					}
					migrated.Add(int32(p.Migrated))
				}()
			}
			wg.Wait()
			if migrated.Load() < 1 {
				t.Fatal("no replica resealed the legacy row")
			}
			b, err = st.GetBackup(ctx, owner, id)
			ok, kerr := st.GetOwnerKey(ctx, owner)
			if err != nil || kerr != nil || b.OwnerKeyID != ok.KeyID || b.KEKFingerprint != "" {
				t.Fatalf("the resealed row: owner key %q of %q (%v, %v)", b.OwnerKeyID, ok.KeyID, err, kerr)
			}
			if got, err := h.m.Catalog.BackupKey(ctx, "tester", owner, id); err != nil || string(got) != string(key) {
				t.Fatalf("the resealed row's key: %v", err)
			}
			importDone(t, h, storetest.Owner("restored"), owner, id)
			if status, _ := h.m.Keys.KeyStatus(ctx); status.KEKs[0].LegacyBackups != 0 || status.KEKs[0].OwnerKeys != 1 {
				t.Fatalf("key status after the migration: %+v", status)
			}
		})
	}
}

// TestKEKRotationBetweenKeepers (issue 37): a rotation from a key keeper
// (base64key://, the in-process stand-in for a KMS that the KMS URLs
// share a code path with) to a local key file, and back to another
// keeper: each time every owner key moves, and the backup opens under
// the new KEK alone.
func TestKEKRotationBetweenKeepers(t *testing.T) {
	st := enginetest.SQLite(t)
	ctx := t.Context()
	h := newHarness(t, st) // keeperURL is the KEK
	owner := storetest.Owner("kms")
	fill(t, st, owner, 2)
	id := exportDone(t, h, exportReq(owner, "under a keeper")).GetBackup()
	want, err := h.m.Catalog.BackupKey(ctx, "tester", owner, id)
	if err != nil {
		t.Fatal(err)
	}
	openKeeper := func(url string) *keyring.KEK {
		k, err := keyring.OpenRetiring(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		return k
	}
	keys := t.TempDir()
	other := "base64key://" + strings.Repeat("A", 43) + "="
	steps := []struct {
		name     string
		current  func() *keyring.KEK
		retiring *keyring.KEK
	}{
		{"keeper to file", func() *keyring.KEK { return localKEK(t, keys) }, openKeeper(keeperURL)},
		{"file to another keeper", func() *keyring.KEK { return openKeeper(other) }, localKEK(t, keys)},
	}
	for _, s := range steps {
		cur := s.current()
		rot := newHarness(t, st, func(c *Config) { c.KEK, c.RetiringKEKs, c.Buckets = cur, []*keyring.KEK{s.retiring}, h.m.cfg.Buckets })
		if err := rot.m.Keys.CheckKEK(ctx); err != nil {
			t.Fatalf("%s: CheckKEK: %v", s.name, err)
		}
		if p, err := rot.m.Keys.MaintainKeys(ctx, nil); err != nil || p.Rotated != 1 {
			t.Fatalf("%s: %+v, %v", s.name, p, err)
		}
		alone := newHarness(t, st, func(c *Config) { c.KEK, c.Buckets = cur, h.m.cfg.Buckets })
		if err := alone.m.Keys.CheckKEK(ctx); err != nil {
			t.Fatalf("%s: CheckKEK with the new KEK alone: %v", s.name, err)
		}
		if got, err := alone.m.Catalog.BackupKey(ctx, "tester", owner, id); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: the backup's key under the new KEK alone: %v", s.name, err)
		}
	}
}
