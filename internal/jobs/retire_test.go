package jobs

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/nacl/secretbox"

	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// liveFile is one file of a store's live files, and which of its 72-byte
// windows to try as a wrapped key: all of them, or (WAL segments, too
// large to try whole) those a PostgreSQL short varlena header of a
// 72-byte bytea precedes, which every stored wrapped key has.
type liveFile struct {
	name    string
	data    []byte
	varlena bool
}

// wrappedLen is a key wrapped by a local KEK: localsecrets' 24-byte nonce,
// the 32-byte key and the 16-byte tag.
const wrappedLen = 24 + 32 + 16

// recoverKeys tries every window of files as a key wrapped by each KEK
// (localsecrets' form: a secretbox under the KEK, its nonce first) and
// returns what opened: what an attacker with the live files and the
// server's KEKs gets.
func recoverKeys(t *testing.T, files []liveFile, keks [][32]byte) [][]byte {
	t.Helper()
	var out [][]byte
	var nonce [24]byte
	for _, f := range files {
		for i := 0; i+wrappedLen <= len(f.data); i++ {
			if f.varlena && (i == 0 || f.data[i-1] != byte((wrappedLen+1)<<1|1)) {
				continue
			}
			copy(nonce[:], f.data[i:i+24])
			for k := range keks {
				if key, ok := secretbox.Open(nil, f.data[i+24:i+wrappedLen], &nonce, &keks[k]); ok {
					out = append(out, key)
				}
			}
		}
	}
	return out
}

// opensAny reports whether any recovered key opens one of the erased
// owner's sealed data keys.
func opensAny(recovered [][]byte, sealed []store.Backup) bool {
	for _, k := range recovered {
		for _, b := range sealed {
			if _, err := keyring.OpenDataKey(k, b.WrappedKey, b.Owner, b.ID); err == nil {
				return true
			}
		}
	}
	return false
}

// whereIsTheKey says, when the scan misses a key it should find, which
// files were read and which of them hold the owner's wrapped key as the
// store returns it: whether the files or the scan are wrong.
func whereIsTheKey(t *testing.T, st store.Store, owner string, files []liveFile) string {
	t.Helper()
	k, err := st.GetOwnerKey(t.Context(), owner)
	if err != nil {
		return fmt.Sprintf("the owner's key row: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the owner's wrapped key is %d bytes under KEK %s; %d files read:\n", len(k.Wrapped), k.KEKFingerprint, len(files))
	for _, f := range files {
		fmt.Fprintf(&b, "  %s: %d bytes, holds the wrapped key: %v\n", f.name, len(f.data), bytes.Contains(f.data, k.Wrapped))
	}
	return b.String()
}

// heldKEKs are the KEKs the server holds in its key directory: the
// current one and every generation, read from their files.
func heldKEKs(t *testing.T, dir string) [][32]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "kek*.key"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no KEK in %s: %v", dir, err)
	}
	var out [][32]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) != 32 {
			t.Fatalf("KEK file %s: %d bytes, %v", p, len(b), err)
		}
		out = append(out, [32]byte(b))
	}
	return out
}

// forensicEngines open a store on each engine with a way to read its live
// files as they stand on disk.
func forensicEngines() []struct {
	name string
	open func(t *testing.T) (store.Store, func() []liveFile)
} {
	return []struct {
		name string
		open func(t *testing.T) (store.Store, func() []liveFile)
	}{
		{"sqlite", func(t *testing.T) (store.Store, func() []liveFile) {
			dir := t.TempDir()
			st, err := sqlite.Open(t.Context(), dir, sqlite.Options{Migrate: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st, func() []liveFile {
				paths, _ := filepath.Glob(filepath.Join(dir, sqlite.FileName+"*"))
				var out []liveFile
				for _, p := range paths {
					data, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, liveFile{name: filepath.Base(p), data: data})
				}
				return out
			}
		}},
		{"postgres", func(t *testing.T) (store.Store, func() []liveFile) {
			dbURL := storetest.NewPostgresDatabase(t)
			st, err := postgres.Open(t.Context(), dbURL, postgres.Options{Migrate: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			nodes := pgNodes(t, st.Pool(), dbURL)
			return st, func() []liveFile {
				var out []liveFile
				for _, n := range nodes {
					out = append(out, n.files(t)...)
				}
				return out
			}
		}},
	}
}

// TestErasureReachesItsCompletionPoint is issue 46's forensic test: the
// live database files keep an erased owner's key row (PostgreSQL's dead
// tuples and WAL), wrapped by the KEK. Once the key worker has retired
// that KEK (a local one rotated, every other row rewrapped, the old one
// destroyed) no window of the live files, tried as a wrapped key under
// every KEK the server holds, opens anything of the erased owner; the
// other owner's backups still open; the erasure reports its completion
// point.
func TestErasureReachesItsCompletionPoint(t *testing.T) {
	for _, e := range forensicEngines() {
		t.Run(e.name, func(t *testing.T) {
			st, live := e.open(t)
			keys := t.TempDir()
			kek, err := keyring.Open(t.Context(), "", keys)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { kek.Close() })
			h := newHarness(t, st, func(c *Config) { c.KEK = kek })
			ctx := t.Context()
			alice, bob := storetest.Owner("alice"), storetest.Owner("bob")
			fill(t, st, alice, 3)
			fill(t, st, bob, 3)
			aliceBackup := exportDone(t, h, exportReq(alice, "full"))
			bobBackup := exportDone(t, h, exportReq(bob, "full"))
			sealed, err := st.GetBackup(ctx, alice, aliceBackup.GetBackup())
			if err != nil {
				t.Fatal(err)
			}
			first, err := kek.Fingerprint()
			if err != nil {
				t.Fatal(err)
			}

			// The scan sees a key where one is: alice's, live.
			if files := live(); !opensAny(recoverKeys(t, files, heldKEKs(t, keys)), []store.Backup{sealed}) {
				t.Fatalf("before the erasure the scan recovers no key of alice's from the live files: it does not read them\n%s", whereIsTheKey(t, st, alice, files))
			}

			j, _ := eraseDone(t, h, EraseRequest{Owner: alice})
			if j.State != store.JobSucceeded {
				t.Fatalf("erasure ended %s: %s", j.State, j.ErrorMessage)
			}
			complete, _, waiting, err := h.m.Keys.ErasureCompletion(ctx, j.ID)
			if err != nil || complete || len(waiting) != 1 || waiting[0] != first {
				t.Fatalf("before the key worker: complete %v, waiting on %v (%v); want waiting on %s", complete, waiting, err, first)
			}
			t.Logf("after the erasure, before the completion point, the live files open alice's backup: %v",
				opensAny(recoverKeys(t, live(), heldKEKs(t, keys)), []store.Backup{sealed}))

			pass, err := h.m.Keys.MaintainKeys(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			now, err := kek.Fingerprint()
			if err != nil {
				t.Fatal(err)
			}
			if now == first || pass.Destroyed != 1 || pass.Rotated != 1 {
				t.Fatalf("key worker pass %+v, KEK %s -> %s; want a rotation, bob's key rewrapped and the old KEK destroyed", pass, first, now)
			}
			if gens, _ := kek.Generations(); len(gens) != 0 {
				t.Fatalf("generations left on disk: %v", gens)
			}
			complete, since, waiting, err := h.m.Keys.ErasureCompletion(ctx, j.ID)
			if err != nil || !complete || since.IsZero() || len(waiting) != 0 {
				t.Fatalf("after the key worker: complete %v since %v, waiting %v (%v)", complete, since, waiting, err)
			}
			if opensAny(recoverKeys(t, live(), heldKEKs(t, keys)), []store.Backup{sealed}) {
				t.Fatal("after the completion point a window of the live files opens, under a KEK the server holds, a key that opens alice's backup")
			}
			// Bob's backup opens under his rewrapped key.
			bobRow, err := st.GetBackup(ctx, bob, bobBackup.GetBackup())
			if err != nil {
				t.Fatal(err)
			}
			key, err := h.m.Keys.unwrap(ctx, bobRow)
			if err != nil {
				t.Fatal(err)
			}
			body, err := h.bucket.ReadAll(ctx, bobBackup.GetArchive().GetKey())
			if err != nil || !opens(body, key) {
				t.Fatalf("bob's backup does not open after the rotation: %v", err)
			}
			st2, err := h.m.Keys.KeyStatus(ctx)
			if err != nil || len(st2.Retirements) != 1 || st2.Retirements[0].Destroyed.IsZero() || st2.Retirements[0].NextStep != "" {
				t.Fatalf("key status: %+v, %v", st2.Retirements, err)
			}
			// A new owner's key is made under the new KEK.
			fill(t, st, storetest.Owner("carol"), 1)
			if _, err := h.m.Keys.MaintainKeys(ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestErasureRotationFollowedByReplicas: two servers share the local key
// directory (as replicas must, to read each other's rows). One rotates for
// an erasure; the other, which read the old KEK, wraps its next owner key
// under the new one, and opens rows either wrapped; nothing is left under
// the retired KEK, which is destroyed (issue 46, finding 1).
func TestErasureRotationFollowedByReplicas(t *testing.T) {
	for _, e := range forensicEngines() {
		t.Run(e.name, func(t *testing.T) {
			st, _ := e.open(t)
			keys := t.TempDir()
			open := func() *keyring.KEK {
				k, err := keyring.Open(t.Context(), "", keys)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { k.Close() })
				return k
			}
			kekA, kekB := open(), open()
			a := newHarness(t, st, func(c *Config) { c.KEK = kekA })
			b := newHarness(t, st, func(c *Config) { c.KEK = kekB })
			ctx := t.Context()
			gone, stays := storetest.Owner("gone"), storetest.Owner("stays")
			fill(t, st, gone, 2)
			fill(t, st, stays, 2)
			exportDone(t, a, exportReq(gone, "full"))
			staysBackup := exportDone(t, b, exportReq(stays, "full"))
			old, _ := kekB.Fingerprint() // B has read the KEK
			if j, _ := eraseDone(t, a, EraseRequest{Owner: gone}); j.State != store.JobSucceeded {
				t.Fatalf("erasure: %s", j.ErrorMessage)
			}
			if _, err := a.m.Keys.MaintainKeys(ctx, nil); err != nil {
				t.Fatal(err)
			}
			newFP, _ := kekA.Fingerprint()
			if newFP == old {
				t.Fatal("no rotation")
			}
			// B's next owner key is under the new KEK, and B opens the
			// rewrapped rows.
			late := storetest.Owner("late")
			fill(t, st, late, 1)
			exportDone(t, b, exportReq(late, "full"))
			k, err := st.GetOwnerKey(ctx, late)
			if err != nil || k.KEKFingerprint != newFP {
				t.Fatalf("replica B wrapped a new owner key under %s (%v); want the new KEK %s", k.KEKFingerprint, err, newFP)
			}
			row, err := st.GetBackup(ctx, stays, staysBackup.GetBackup())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.m.Keys.unwrap(ctx, row); err != nil {
				t.Fatalf("replica B opens a row A rewrapped: %v", err)
			}
			counts, err := st.KeyCounts(ctx, "")
			if err != nil || counts.OwnerKeys[old] != 0 {
				t.Fatalf("rows under the retired KEK: %v (%v)", counts.OwnerKeys, err)
			}
			if _, err := os.Stat(filepath.Join(keys, fmt.Sprintf("kek-%s.key", old))); !os.IsNotExist(err) {
				t.Fatalf("the retired KEK's file: %v; want it destroyed", err)
			}
		})
	}
}

// TestErasureWaitsForTheOperatorsKMSRotation: a KMS key is not the
// server's to rotate. The erasure waits on it, the key status says what
// the operator does, and the operator's rotation (a new key current, the
// old one retiring, then dropped) completes it.
func TestErasureWaitsForTheOperatorsKMSRotation(t *testing.T) {
	st := enginetest.SQLite(t)
	h := newHarness(t, st)
	ctx := t.Context()
	owner := storetest.Owner("kms")
	fill(t, st, owner, 2)
	exportDone(t, h, exportReq(owner, "full"))
	other := storetest.Owner("other")
	fill(t, st, other, 2)
	otherBackup := exportDone(t, h, exportReq(other, "full"))
	j, _ := eraseDone(t, h, EraseRequest{Owner: owner})
	if _, err := h.m.Keys.MaintainKeys(ctx, nil); err != nil {
		t.Fatal(err)
	}
	status, err := h.m.Keys.KeyStatus(ctx)
	if err != nil || len(status.Retirements) != 1 || !status.Retirements[0].Retired.IsZero() ||
		!strings.Contains(status.Retirements[0].NextStep, "--job-key-retiring") {
		t.Fatalf("key status with a KMS key: %+v (%v); want the operator's step", status.Retirements, err)
	}
	if complete, _, _, _ := h.m.Keys.ErasureCompletion(ctx, j.ID); complete {
		t.Fatal("complete while the server still holds the KMS key")
	}
	h.m.Runner.Close(ctx)

	oldKEK := h.m.cfg.KEK
	newKEK, err := keyring.Open(ctx, "base64key://"+strings.Repeat("AQID", 10)+"AQI=", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { newKEK.Close() })
	rotating := newHarness(t, st, func(c *Config) { c.KEK, c.RetiringKEKs = newKEK, []*keyring.KEK{oldKEK} })
	if _, err := rotating.m.Keys.MaintainKeys(ctx, nil); err != nil {
		t.Fatal(err)
	}
	status, _ = rotating.m.Keys.KeyStatus(ctx)
	if len(status.Retirements) != 1 || status.Retirements[0].Retired.IsZero() || !strings.Contains(status.Retirements[0].NextStep, "drop it") {
		t.Fatalf("after the rotation: %+v; want retired, waiting to be dropped", status.Retirements)
	}
	rotating.m.Runner.Close(ctx)

	done := newHarness(t, st, func(c *Config) { c.KEK = newKEK })
	if _, err := done.m.Keys.MaintainKeys(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if complete, since, _, err := done.m.Keys.ErasureCompletion(ctx, j.ID); !complete || since.IsZero() || err != nil {
		t.Fatalf("after the old key was dropped: complete %v since %v (%v)", complete, since, err)
	}
	row, err := st.GetBackup(ctx, other, otherBackup.GetBackup())
	if err != nil {
		t.Fatal(err)
	}
	key, err := done.m.Keys.unwrap(ctx, row)
	if err != nil {
		t.Fatal(err)
	}
	body, err := h.bucket.ReadAll(ctx, otherBackup.GetArchive().GetKey())
	if err != nil || !opens(body, key) {
		t.Fatal("the other owner's backup does not open under the new KMS key")
	}
}

// pgNode is one PostgreSQL server that holds the store's rows: the server
// itself, or on Citus the coordinator and each worker (owner_keys' shards
// live on the workers).
type pgNode struct {
	pool     *pgxpool.Pool
	dataDir  string
	startWAL string
}

func pgNodes(t *testing.T, pool *pgxpool.Pool, dbURL string) []pgNode {
	t.Helper()
	nodes := []*pgxpool.Pool{pool}
	var citus bool
	if err := pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		t.Fatal(err)
	}
	if citus {
		rows, err := pool.Query(t.Context(), `SELECT nodename, nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'`)
		if err != nil {
			t.Fatal(err)
		}
		var addrs []string
		for rows.Next() {
			var host string
			var port int
			if err := rows.Scan(&host, &port); err != nil {
				t.Fatal(err)
			}
			addrs = append(addrs, fmt.Sprintf("%s:%d", host, port))
		}
		rows.Close()
		for _, a := range addrs {
			u, err := url.Parse(dbURL)
			if err != nil {
				t.Fatal(err)
			}
			u.Host = a
			p, err := pgxpool.New(t.Context(), u.String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			nodes = append(nodes, p)
		}
	}
	var out []pgNode
	for _, p := range nodes {
		n := pgNode{pool: p}
		if err := p.QueryRow(t.Context(), `SELECT current_setting('data_directory'), pg_walfile_name(pg_current_wal_lsn())`).Scan(&n.dataDir, &n.startWAL); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(n.dataDir); err != nil {
			t.Fatalf("the forensic test reads the PostgreSQL server's data directory, %s, which this machine cannot (run the tests beside the server, as scripts/ensure-postgres.sh does): %v", n.dataDir, err)
		}
		out = append(out, n)
	}
	return out
}

// files reads the node's owner_keys files (the table, or its shards) and
// the WAL segments written since the test began.
func (n pgNode) files(t *testing.T) []liveFile {
	t.Helper()
	// Dirty pages reach the data files at a checkpoint: what a copy of
	// the files holds once the server has written them.
	if _, err := n.pool.Exec(t.Context(), "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	// Citus hides a worker's shards from pg_class unless asked: without
	// this the scan read only the empty shell tables and found keys in
	// the WAL alone, and missed one whenever its record crossed a WAL
	// page. (On plain PostgreSQL the setting is an unused placeholder.)
	tx, err := n.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if _, err := tx.Exec(t.Context(), "SET LOCAL citus.override_table_visibility = off"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(t.Context(), `SELECT pg_relation_filepath(oid) FROM pg_class WHERE relkind = 'r' AND (relname = 'owner_keys' OR relname ~ '^owner_keys_[0-9]+$')`)
	if err != nil {
		t.Fatal(err)
	}
	var rels []string
	for rows.Next() {
		var rel string
		if err := rows.Scan(&rel); err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var out []liveFile
	for _, rel := range rels {
		paths, _ := filepath.Glob(filepath.Join(n.dataDir, rel) + "*")
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, liveFile{name: strings.TrimPrefix(p, n.dataDir), data: data})
		}
	}
	segments, _ := filepath.Glob(filepath.Join(n.dataDir, "pg_wal", "0*"))
	for _, p := range segments {
		if len(filepath.Base(p)) != 24 || filepath.Base(p)[8:] < n.startWAL[8:] {
			continue // written before this test
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, liveFile{name: "pg_wal/" + filepath.Base(p), data: walRecords(data), varlena: true})
	}
	return out
}

// TestErasureRotationInAReadOnlyKeyDirectory: a local KEK whose directory
// the server cannot write (a read-only mount) cannot be rotated; the key
// worker's pass still does the rest, and the key status says what the
// operator does instead.
func TestErasureRotationInAReadOnlyKeyDirectory(t *testing.T) {
	st := enginetest.SQLite(t)
	keys := t.TempDir()
	kek, err := keyring.Open(t.Context(), "", keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kek.Close() })
	h := newHarness(t, st, func(c *Config) { c.KEK = kek })
	owner := storetest.Owner("ro")
	fill(t, st, owner, 1)
	exportDone(t, h, exportReq(owner, "full"))
	// A read-only mount cannot be made here, and root writes through mode
	// bits: the rotation lock made a directory fails the rotation the way
	// a read-only directory does, for root too.
	if err := os.Mkdir(filepath.Join(keys, ".rotate.lock"), 0o700); err != nil {
		t.Fatal(err)
	}
	if j, _ := eraseDone(t, h, EraseRequest{Owner: owner}); j.State != store.JobSucceeded {
		t.Fatalf("erasure: %s", j.ErrorMessage)
	}
	if _, err := h.m.Keys.MaintainKeys(t.Context(), nil); err != nil {
		t.Fatalf("the key worker's pass failed with the rotation: %v", err)
	}
	status, err := h.m.Keys.KeyStatus(t.Context())
	if err != nil || len(status.Retirements) != 1 || !strings.Contains(status.Retirements[0].NextStep, "could not rotate") {
		t.Fatalf("key status: %+v, %v; want the rotation's failure and what to do", status.Retirements, err)
	}
}

// walRecords is a WAL segment without its page headers: a record that
// crosses a page is whole again, as an attacker who reads the format
// would put it together (XLOG_BLCKSZ pages; a long header where
// xlp_info has XLP_LONG_HEADER, a short one elsewhere, both MAXALIGNed).
func walRecords(segment []byte) []byte {
	const (
		pageSize    = 8192
		shortHeader = 24
		longHeader  = 40
		longFlag    = 0x0002
	)
	out := make([]byte, 0, len(segment))
	for off := 0; off+pageSize <= len(segment); off += pageSize {
		page := segment[off : off+pageSize]
		header := shortHeader
		if page[2]&longFlag != 0 {
			header = longHeader
		}
		out = append(out, page[header:]...)
	}
	return out
}
