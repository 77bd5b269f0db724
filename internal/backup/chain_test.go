package backup

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

	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup/backuptest"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// takenBackup is one backup of a random history: its archive, the change
// its snapshot saw, the full backup its chain starts at, and the model's
// snapshot at its export time.
type takenBackup struct {
	data []byte
	seq  int64
	full int   // index of its chain's full backup
	at   int64 // its export time
	want []*ds.BackupElement
}

// chainOf opens backups[full..k] as one chain.
func chainOf(t *testing.T, s store.Store, owner string, backups []takenBackup, k int) *Chain {
	t.Helper()
	var members []ChainMember
	for _, b := range backups[backups[k].full : k+1] {
		r, err := archive.NewReader(bytes.NewReader(b.data), key, archive.ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, ChainMember{Archive: r, ChangeSeq: b.seq})
	}
	c, err := NewChain(t.Context(), s, owner, members)
	if err != nil {
		t.Fatalf("open the chain of backup %d: %v", k, err)
	}
	return c
}

// seeds is the histories a test runs: three fixed seeds, or
// RESTORE_SEEDS of them (make restore-soak).
func seeds() []uint64 {
	n, _ := strconv.Atoi(os.Getenv("RESTORE_SEEDS"))
	if n <= 0 {
		n = 3
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(1000 + i)
	}
	return out
}

// TestChainRestoreIsTheSnapshot_ARCH013_ARCH014_ARCH016: random histories
// of an owner (every group field updated, one-shot conversations turned
// into groups and back, consent restated, messages deleted and their ids
// reused, messages expiring and purged, conversations imported and later
// activated, late imports) with full and incremental backups at random
// points. For every backup, its chain read as one snapshot (a) written as
// a synthetic full is record for record the model's exportable state at
// the backup's export time, and (b) imported into an empty owner leaves
// exactly that state (groups Restored, ARCH-015). Importing the members
// one after another, as chains were restored before, fails (b) as soon as
// a stored group changed between backups (ARCH-014 keeps the stored one).
// Then (c) every backup, in random order, restored in replace mode into
// the owner itself leaves the owner's export at that backup's time equal
// to its snapshot, whatever the owner held before.
func TestChainRestoreIsTheSnapshot_ARCH013_ARCH014_ARCH016(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		var histories, backups, compared int
		for _, seed := range seeds() {
			owner := storetest.Owner(fmt.Sprintf("history-%d", seed))
			h := backuptest.NewHistory(s, owner, seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			var taken []takenBackup
			for range 160 {
				h.Step(t)
				if rng.IntN(10) != 0 {
					continue
				}
				var buf bytes.Buffer
				cfg, full := ExportConfig{}, len(taken)
				if len(taken) > 0 && rng.IntN(4) != 0 {
					last := taken[len(taken)-1]
					cfg.ChangedAfter, full = &last.seq, last.full
				}
				counts, err := Export(t.Context(), s, owner, key, nil, h.Clock, &buf, cfg)
				if err != nil {
					t.Fatal(err)
				}
				taken = append(taken, takenBackup{data: buf.Bytes(), seq: counts.ChangeSeq, full: full, at: h.Clock, want: h.Snapshot(h.Clock)})
			}
			// Every backup, read after the whole history ran on.
			for k, b := range taken {
				c := chainOf(t, s, owner, taken, k)
				var out bytes.Buffer
				if _, err := Synthesize(c, &out, key, nil); err != nil {
					t.Fatalf("seed %d backup %d: synthesize: %v", seed, k, err)
				}
				c.Close()
				_, got := elements(t, out.Bytes())
				if d := backuptest.Diff(got, b.want, 10); len(d) > 0 {
					t.Errorf("seed %d backup %d (chain of %d): the synthetic full is not the snapshot:\n%v", seed, k, k-b.full+1, d)
				}

				c = chainOf(t, s, owner, taken, k)
				dst := storetest.Owner("restored")
				if _, err := ImportFrom(t.Context(), s, dst, c, ImportOptions{}); err != nil {
					t.Fatalf("seed %d backup %d: restore: %v", seed, k, err)
				}
				c.Close()
				if d := backuptest.Diff(backuptest.Stored(t, s, dst), backuptest.Restored(b.want), 10); len(d) > 0 {
					t.Errorf("seed %d backup %d (chain of %d): the restore is not the snapshot:\n%v", seed, k, k-b.full+1, d)
				}
				compared += len(b.want)
			}
			// Every backup restored in replace mode into the owner
			// itself, in random order: the owner's export at the
			// backup's time is then that backup's snapshot, whatever the
			// owner held before.
			for _, k := range rng.Perm(len(taken)) {
				b := taken[k]
				c := chainOf(t, s, owner, taken, k)
				if _, err := Replace(t.Context(), s, owner, c, nil, nil); err != nil {
					t.Fatalf("seed %d backup %d: replace: %v", seed, k, err)
				}
				c.Close()
				var buf bytes.Buffer
				if _, err := Export(t.Context(), s, owner, key, nil, b.at, &buf, ExportConfig{}); err != nil {
					t.Fatal(err)
				}
				_, got := elements(t, buf.Bytes())
				if d := backuptest.Diff(got, b.want, 10); len(d) > 0 {
					t.Errorf("seed %d backup %d: after a replace the owner is not the snapshot:\n%v", seed, k, d)
				}
				compared += len(b.want)
			}
			histories++
			backups += len(taken)
			t.Logf("seed %d: %v", seed, h.Ops)
		}
		t.Logf("%d histories, %d backups, %d records compared", histories, backups, compared)
	})
}

// TestChainRefusesMembersOutOfOrder: a member whose records are not in
// export order, or members of other selections, cannot be merged, and the
// chain says so rather than restore something else.
func TestChainRefusesMembersOutOfOrder(t *testing.T) {
	s := enginetest.SQLite(t)
	open := func(els ...*ds.BackupElement) ChainMember {
		r, err := archive.NewReader(bytes.NewReader(archiveOf(t, els...)), key, archive.ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ChainMember{Archive: r}
	}
	read := func(members ...ChainMember) error {
		c, err := NewChain(t.Context(), s, "owner", members)
		if err != nil {
			return err
		}
		defer c.Close()
		for {
			if _, err := c.Next(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	if err := read(open(metaEl(), groupEl("g1"), msgEl("m1", "g1"))); err != nil {
		t.Fatalf("an ordered member: %v", err)
	}
	for name, els := range map[string][]*ds.BackupElement{
		"groups out of order":        {metaEl(), groupEl("g2"), groupEl("g1")},
		"a message of another group": {metaEl(), groupEl("g1"), msgEl("m1", "g2")},
		"a message before any group": {metaEl(), msgEl("m1", "g1")},
		"a repeated message":         {metaEl(), groupEl("g1"), msgEl("m1", "g1"), msgEl("m1", "g1")},
	} {
		if err := read(open(els...)); !errors.Is(err, ErrChainOrder) {
			t.Errorf("%s: %v, want ErrChainOrder", name, err)
		}
	}
	other := metaEl()
	other.GetMetadata().Elements = []ds.BackupElementSelection{selMessages}
	if err := read(open(metaEl()), open(other)); !errors.Is(err, ErrChainMismatch) {
		t.Errorf("members of other selections: %v, want ErrChainMismatch", err)
	}
}

// TestIncrementHoldsWhatBecameExportable (issue 45, finding 2): a
// conversation imported (Restored, so the full backup leaves it out,
// ARCH-026) and activated after the full, or a one-shot conversation put
// again as a group, brings every message it holds into the next
// increment, not only the group row.
func TestIncrementHoldsWhatBecameExportable(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		owner := storetest.Owner("became")
		imported := storetest.MinimalGroup("imported")
		if _, err := s.MergeGroups(ctx, owner, []*gb.GroupSave{imported}); err != nil {
			t.Fatal(err)
		}
		oneShot := storetest.MinimalGroup("one-shot")
		oneShot.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_ONESHOT
		if _, err := s.PutGroup(ctx, owner, oneShot); err != nil {
			t.Fatal(err)
		}
		msgs := []*mb.GroupMessageSave{storetest.Message("imp-1", imported.Id, 1), storetest.Message("one-1", oneShot.Id, 1)}
		if _, err := s.AppendMessages(ctx, owner, msgs, store.AppendOptions{AllowRestored: true}); err != nil {
			t.Fatal(err)
		}
		var full bytes.Buffer
		counts, err := Export(ctx, s, owner, key, nil, exportAt, &full, ExportConfig{})
		if err != nil || counts.Messages != 0 {
			t.Fatalf("full: %+v %v; want no message", counts, err)
		}
		if _, _, err := s.ActivateGroup(ctx, owner, imported.Id); err != nil {
			t.Fatal(err)
		}
		oneShot.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP
		if _, err := s.PutGroup(ctx, owner, oneShot); err != nil {
			t.Fatal(err)
		}
		var inc bytes.Buffer
		if _, err := Export(ctx, s, owner, key, nil, exportAt, &inc, ExportConfig{ChangedAfter: &counts.ChangeSeq}); err != nil {
			t.Fatal(err)
		}
		_, els := elements(t, inc.Bytes())
		var got []string
		for _, el := range els {
			if m := el.GetGroupMessage(); m != nil {
				got = append(got, string(m.Id))
			}
		}
		diff(t, "the increment's messages", got, []string{"imp-1", "one-1"})
	})
}

// TestImportSkipsExpiredMessages_ARCH016 (issue 45, finding 4): a message
// that had expired when the import read it is counted as skipped and
// never stored, so importing the same archive again, after the purge or
// not, reports nothing inserted.
func TestImportSkipsExpiredMessages_ARCH016(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s store.Store) {
		expired := storetest.Message("gone", storetest.GroupID("g1"), 1)
		expired.ExpiresAtNs, expired.ExpiryKnown = proto.Int64(time.Now().Add(-time.Minute).UnixNano()), proto.Bool(true)
		live := storetest.Message("here", storetest.GroupID("g1"), 2)
		data := archiveOf(t, metaEl(), groupEl("g1"), &ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: expired}},
			&ds.BackupElement{Element: &ds.BackupElement_GroupMessage{GroupMessage: live}})
		owner := storetest.Owner("expired-import")
		for i, want := range []uint64{1, 0} {
			res, err := Import(t.Context(), s, owner, key, bytes.NewReader(data), ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Messages.Inserted != want || res.Expired != 1 || res.Skipped < 1 {
				t.Errorf("import %d: inserted %d, expired %d, skipped %d; want %d, 1, at least 1", i+1, res.Messages.Inserted, res.Expired, res.Skipped, want)
			}
			if _, _, err := s.PurgeExpired(t.Context(), time.Now(), "", 100, 100); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := s.MessagesExist(t.Context(), owner, [][]byte{[]byte("gone")}); err != nil || got[0] {
			t.Errorf("the expired message is stored: %v %v", got, err)
		}
	})
}
