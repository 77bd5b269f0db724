package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/backup/backuptest"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestChainRestoreIsTheIncrementsSnapshot (issue 45, findings 1 and 5): a
// group renamed and a message deleted between a full backup and its
// increment; restoring the increment gives the renamed group and no
// deleted message, on both engines, into an empty owner, where importing
// the chain's members oldest first gave the old name and the deleted
// message back (import keeps a stored group: ARCH-014).
func TestChainRestoreIsTheIncrementsSnapshot(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st)
			ctx := t.Context()
			src, dst := storetest.Owner("rename-src"), storetest.Owner("rename-dst")
			g := storetest.FullGroup("renamed")
			g.MutableMetadata.Attributes["group_name"] = "before"
			if _, err := st.PutGroup(ctx, src, g); err != nil {
				t.Fatal(err)
			}
			if _, err := st.AppendMessages(ctx, src, []*mb.GroupMessageSave{storetest.Message("kept", g.Id, 1), storetest.Message("deleted", g.Id, 2)}, store.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			full := exportDone(t, h, exportReq(src, "full"))
			g.MutableMetadata.Attributes["group_name"] = "after"
			if _, err := st.PutGroup(ctx, src, g); err != nil {
				t.Fatal(err)
			}
			if err := st.DeleteMessage(ctx, src, g.Id, []byte("deleted"), func(*mb.GroupMessageSave, *gb.GroupSave) error { return nil }); err != nil {
				t.Fatal(err)
			}
			inc := exportDone(t, h, ExportRequest{Owner: src, Label: "inc", Since: full.GetBackup()})
			importDone(t, h, dst, src, inc.GetBackup())
			got, err := st.GetGroup(ctx, dst, g.Id)
			if err != nil || got.GetMutableMetadata().GetAttributes()["group_name"] != "after" {
				t.Errorf("restored group name %q (%v), want the increment's %q", got.GetMutableMetadata().GetAttributes()["group_name"], err, "after")
			}
			exist, err := st.MessagesExist(ctx, dst, [][]byte{[]byte("kept"), []byte("deleted")})
			if err != nil || !exist[0] || exist[1] {
				t.Errorf("restored messages kept=%v deleted=%v (%v): want the full's message and not the deleted one", exist[0], exist[1], err)
			}
		})
	}
}

// TestRestoreIsTheSnapshot_ARCH013_ARCH014_ARCH016: random histories of
// an owner (backuptest.History) with full backups and increments taken by
// export jobs at random points; every backup, restored by an import job
// into an empty owner after the whole history ran, holds exactly the
// model's exportable state at that backup's export time, on both engines.
// RESTORE_SEEDS sets how many histories (make restore-soak).
func TestRestoreIsTheSnapshot_ARCH013_ARCH014_ARCH016(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("RESTORE_SEEDS"))
	if n <= 0 {
		n = 2
	}
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st)
			var backups, compared int
			for seed := range uint64(n) {
				owner := storetest.Owner(fmt.Sprintf("jobs-history-%d", seed))
				hist := backuptest.NewHistory(st, owner, 2000+seed)
				// Export jobs run at the wall clock's time: the purge and
				// expiry at the snapshot's time are TestChainRestoreIsTheSnapshot's.
				hist.NoPurge = true
				rng := rand.New(rand.NewPCG(seed, 45))
				type taken struct {
					id   string
					want []*ds.BackupElement
				}
				var all []taken
				for range 120 {
					hist.Step(t)
					if rng.IntN(12) != 0 {
						continue
					}
					req := exportReq(owner, "")
					if len(all) > 0 && rng.IntN(4) != 0 {
						req.Since = all[len(all)-1].id
					}
					res := exportDone(t, h, req)
					all = append(all, taken{id: res.GetBackup(), want: hist.Snapshot(res.GetSummary().GetExportedAtNs())})
				}
				for k, b := range all {
					dst := storetest.Owner("jobs-restored")
					importDone(t, h, dst, owner, b.id)
					if d := backuptest.Diff(backuptest.Stored(t, st, dst), backuptest.Restored(b.want), 10); len(d) > 0 {
						t.Errorf("seed %d backup %d (%s): the restore is not the snapshot:\n%v", seed, k, b.id, d)
					}
					// What the tools hand a device: the synthetic full,
					// record for record the snapshot.
					if d := backuptest.Diff(synthesized(t, h, owner, b.id), b.want, 10); len(d) > 0 {
						t.Errorf("seed %d backup %d (%s): the synthetic full is not the snapshot:\n%v", seed, k, b.id, d)
					}
					compared += 2 * len(b.want)
				}
				// Every backup restored in replace mode into the owner
				// itself, in random order: the owner's export is then
				// that backup's snapshot.
				for _, k := range rng.Perm(len(all)) {
					b := all[k]
					j, err := h.m.StartImport(t.Context(), "tester", ImportRequest{Owner: owner, Backup: b.id, Replace: true})
					if err != nil {
						t.Fatal(err)
					}
					if j = waitDone(t, h.m, j.ID); j.State != store.JobSucceeded {
						t.Fatalf("replace of %s ended %s: %d %s", b.id, j.State, j.ErrorCode, j.ErrorMessage)
					}
					if d := backuptest.Diff(exported(t, st, owner), b.want, 10); len(d) > 0 {
						t.Errorf("seed %d backup %d (%s): after a replace the owner is not the snapshot:\n%v", seed, k, b.id, d)
					}
					compared += len(b.want)
				}
				backups += len(all)
			}
			t.Logf("%d histories, %d backups restored, %d records compared, on %s", n, backups, compared, e.Name)
		})
	}
}

// synthesized writes backup id's snapshot as a synthetic full by an export
// job and returns its elements, read back with the container alone under
// the key GetBackupKey hands out.
func synthesized(t *testing.T, h *harness, owner, id string) []*ds.BackupElement {
	t.Helper()
	res := exportDone(t, h, ExportRequest{Owner: owner, From: id})
	src, err := h.m.Catalog.Backup(t.Context(), owner, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetSummary().GetExportedAtNs() != src.Summary.ExportedAtNs {
		t.Errorf("synthetic full of %s exported at %d, want the backup's %d", id, res.GetSummary().GetExportedAtNs(), src.Summary.ExportedAtNs)
	}
	key, err := h.m.Catalog.BackupKey(t.Context(), "tester", owner, res.GetBackup())
	if err != nil {
		t.Fatal(err)
	}
	data, err := h.bucket.ReadAll(t.Context(), res.GetArchive().GetKey())
	if err != nil {
		t.Fatal(err)
	}
	return elementsOf(t, data, key)
}

// elementsOf reads an archive's elements after its metadata with the
// container alone.
func elementsOf(t *testing.T, data, key []byte) []*ds.BackupElement {
	t.Helper()
	r, err := archive.NewReader(bytes.NewReader(data), key, readerOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Metadata(); err != nil {
		t.Fatal(err)
	}
	var out []*ds.BackupElement
	for {
		el, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, el)
	}
}

// TestSynthesizeRefusals: a synthetic full names a complete backup of its
// own owner, is no increment, and keeps that backup's options; no
// increment can be based on it.
func TestSynthesizeRefusals(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	owner := storetest.Owner("synth")
	fill(t, st, owner, 3)
	full := exportDone(t, h, exportReq(owner, "full"))
	ctx := t.Context()
	for name, req := range map[string]ExportRequest{
		"another owner's backup": {Owner: storetest.Owner("other"), From: full.GetBackup()},
		"with since_backup":      {Owner: owner, From: full.GetBackup(), Since: full.GetBackup()},
		"other options":          {Owner: owner, From: full.GetBackup(), Options: &ds.ArchiveOptions{}},
		"an unknown backup":      {Owner: owner, From: "00000000000000000000000000000000"},
	} {
		if _, err := h.m.StartExport(ctx, "tester", req); err == nil {
			t.Errorf("%s: started", name)
		}
	}
	synth := exportDone(t, h, ExportRequest{Owner: owner, From: full.GetBackup()})
	if _, err := h.m.StartExport(ctx, "tester", ExportRequest{Owner: owner, Since: synth.GetBackup()}); !errors.Is(err, ErrNoChangeSequence) {
		t.Errorf("an increment of a synthetic full: %v, want ErrNoChangeSequence", err)
	}
}

// exported is what an export of owner holds now, read back.
func exported(t *testing.T, st store.Store, owner string) []*ds.BackupElement {
	t.Helper()
	key := bytes.Repeat([]byte{3}, 32)
	var buf bytes.Buffer
	if _, err := backup.Export(t.Context(), st, owner, key, nil, time.Now().UnixNano(), &buf, backup.ExportConfig{}); err != nil {
		t.Fatal(err)
	}
	return elementsOf(t, buf.Bytes(), key)
}

// TestReplaceStartsAFreshChain: after a restore in replace mode no backup
// taken before it is the base of an increment (the chain would restore
// what the replace deleted), a schedule's next backup is a full one, and
// a replace is no dry run.
func TestReplaceStartsAFreshChain(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			st := e.Open(t)
			h := newHarness(t, st)
			ctx := t.Context()
			owner := storetest.Owner("replace-floor")
			fill(t, st, owner, 3)
			full := exportDone(t, h, exportReq(owner, "full"))
			if base, err := h.m.Catalog.nextBase(ctx, &Schedule{FullEvery: 7}, owner); err != nil || base != full.GetBackup() {
				t.Fatalf("before the replace a schedule builds on %q (%v), want the full", base, err)
			}
			if _, err := h.m.StartImport(ctx, "tester", ImportRequest{Owner: owner, Backup: full.GetBackup(), Replace: true, ValidateOnly: true}); !errors.Is(err, ErrInvalid) {
				t.Errorf("replace with validate_only: %v, want ErrInvalid", err)
			}
			j, err := h.m.StartImport(ctx, "tester", ImportRequest{Owner: owner, Backup: full.GetBackup(), Replace: true})
			if err != nil {
				t.Fatal(err)
			}
			if j = waitDone(t, h.m, j.ID); j.State != store.JobSucceeded {
				t.Fatalf("replace ended %s: %s", j.State, j.ErrorMessage)
			}
			if _, err := h.m.StartExport(ctx, "tester", ExportRequest{Owner: owner, Since: full.GetBackup()}); !errors.Is(err, ErrBaseBeforeReplace) {
				t.Errorf("an increment of a backup taken before the replace: %v, want ErrBaseBeforeReplace", err)
			}
			base, err := h.m.Catalog.nextBase(ctx, &Schedule{FullEvery: 7}, owner)
			if err != nil || base != "" {
				t.Errorf("a schedule's next backup after a replace builds on %q (%v), want a full one", base, err)
			}
			after := exportDone(t, h, exportReq(owner, "after"))
			exportDone(t, h, ExportRequest{Owner: owner, Since: after.GetBackup()})
		})
	}
}
