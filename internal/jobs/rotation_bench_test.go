package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// BenchmarkKEKRotation (issue 37; make bench-rotation): a catalog of
// 10,000 backups (10 each for 998 owners, sealed and written as the
// server seals them, and 20 owners with real exports), rotated to a new
// KEK while exports and restores of the real owners run. It reports the
// rotation's rate (owner keys and the backups they cover, per second),
// the mean time of a job during the rotation against the same jobs just
// before it (the ceiling, measured side by side), and fails on any
// failed job, and unless, with the old KEK removed, every one of the
// 10,000 backups still opens to its end. BENCH_ENGINE=postgres runs it
// on Postgres (TEST_DATABASE_URL).
func BenchmarkKEKRotation(b *testing.B) {
	for range b.N {
		b.StopTimer()
		rotateOnce(b)
	}
}

func rotateOnce(b *testing.B) {
	ctx := context.Background()
	open := enginetest.SQLite
	if os.Getenv("BENCH_ENGINE") == "postgres" {
		open = enginetest.Postgres
	}
	st := open(b)
	keys := b.TempDir()
	dir := b.TempDir()
	buckets := NewBuckets(map[string]string{"local": "file://" + dir + "?no_tmp_dir=1&metadata=skip"})
	b.Cleanup(func() { buckets.Close() })
	newManager := func(kek *keyring.KEK, retiring ...*keyring.KEK) *Manager {
		m := New(Config{Store: st, KEK: kek, RetiringKEKs: retiring, Buckets: buckets, Pool: budget.NewPool(1 << 30),
			Import: backup.ImportOptions{ReadAheadBytes: 64 << 20, Reader: readerOpts}, MaxRunning: 4, MaxRunningPerOwner: 2})
		b.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m.Runner.Close(c)
		})
		return m
	}
	openKEK := func(retiring string) *keyring.KEK {
		var k *keyring.KEK
		var err error
		if retiring != "" {
			k, err = keyring.OpenRetiring(ctx, retiring)
		} else {
			k, err = keyring.Open(ctx, "", keys)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { k.Close() })
		return k
	}
	before := newManager(openKEK(""))
	bucket, err := buckets.Open(ctx, "local")
	if err != nil {
		b.Fatal(err)
	}

	const realOwners, synthetic, perOwner = 20, 9_980, 10
	type ref struct{ owner, id string }
	var all []ref
	var real []ref
	for i := range realOwners {
		owner := storetest.Owner(fmt.Sprintf("real-%02d", i))
		if _, err := st.PutGroup(ctx, owner, storetest.FullGroup("g")); err != nil {
			b.Fatal(err)
		}
		if _, err := st.AppendMessages(ctx, owner, storetest.Messages("m", storetest.GroupID("g"), 50, 1), store.AppendOptions{}); err != nil {
			b.Fatal(err)
		}
		j, err := before.StartExport(ctx, "bench", ExportRequest{Owner: owner})
		if err != nil {
			b.Fatal(err)
		}
		if j, err = before.Runner.Wait(ctx, j.ID, 5*time.Millisecond); err != nil || j.State != store.JobSucceeded {
			b.Fatalf("export: %v %s", err, j.ErrorMessage)
		}
		md, _ := Progress(j)
		real = append(real, ref{owner, md.GetBackup()})
	}
	all = append(all, real...)
	meta := &ds.BackupElement{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{ExportedAtNs: 1}}}
	now := time.Now()
	for i := range synthetic {
		owner := fmt.Sprintf("bench-%04d", i/perOwner)
		id := NewID(now.Add(time.Duration(i)))
		key, sealed, keyID, err := before.Keys.newDataKey(ctx, owner, id)
		if err != nil {
			b.Fatal(err)
		}
		var body bytes.Buffer
		w, err := archive.NewWriter(&body, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.WriteElement(meta); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		objectKey := ownerDir("", owner) + id + ArchiveSuffix
		if err := bucket.WriteAll(ctx, objectKey, body.Bytes(), nil); err != nil {
			b.Fatal(err)
		}
		sum := sha256.Sum256(body.Bytes())
		row := store.Backup{Owner: owner, ID: id, State: store.BackupComplete, Bucket: "local", ObjectKey: objectKey, Options: []byte{},
			WrappedKey: sealed, OwnerKeyID: keyID, Created: now, Completed: now,
			Summary: store.BackupSummary{Length: uint64(body.Len()), SHA256: sum[:], At: now, ChangeSeq: -1}}
		if err := st.CreateBackup(ctx, row); err != nil {
			b.Fatal(err)
		}
		all = append(all, ref{owner, id})
	}

	// The jobs the rotation runs beside: an export and a restore of a
	// real owner, round after round.
	jobRound := func(m *Manager, i int, took *[]time.Duration, mu *sync.Mutex, failed *atomic.Int32) {
		r := real[i%len(real)]
		for _, start := range []func() (store.Job, error){
			func() (store.Job, error) { return m.StartExport(ctx, "bench", ExportRequest{Owner: r.owner}) },
			func() (store.Job, error) {
				return m.StartImport(ctx, "bench", ImportRequest{Owner: r.owner + "-restored", SourceOwner: r.owner, Backup: r.id})
			},
		} {
			t0 := time.Now()
			j, err := start()
			if err == nil {
				j, err = m.Runner.Wait(ctx, j.ID, 5*time.Millisecond)
			}
			if err != nil || j.State != store.JobSucceeded {
				failed.Add(1)
				b.Logf("job failed: %v %s", err, j.ErrorMessage)
				continue
			}
			mu.Lock()
			*took = append(*took, time.Since(t0))
			mu.Unlock()
		}
	}
	var mu sync.Mutex
	var failed atomic.Int32
	var baseline []time.Duration
	for i := range 40 {
		jobRound(before, i, &baseline, &mu, &failed)
	}

	// The rotation: the old key file aside as retiring, a new KEK.
	old := filepath.Join(keys, "kek-retiring.key")
	if err := os.Rename(filepath.Join(keys, keyring.KEKFile), old); err != nil {
		b.Fatal(err)
	}
	rot := newManager(openKEK(""), openKEK(old))
	if err := rot.Keys.CheckKEK(ctx); err != nil {
		b.Fatal(err)
	}
	var during []time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			jobRound(rot, i, &during, &mu, &failed)
		}
	}()
	b.StartTimer()
	t0 := time.Now()
	pass, err := rot.Keys.MaintainKeys(ctx, nil)
	elapsed := time.Since(t0)
	b.StopTimer()
	close(stop)
	wg.Wait()
	if err != nil || pass.Failed != 0 {
		b.Fatalf("rotation: %+v, %v", pass, err)
	}
	if failed.Load() != 0 {
		b.Fatalf("%d jobs failed", failed.Load())
	}

	// The old KEK removed: every backup opens to its end.
	if err := os.Remove(old); err != nil {
		b.Fatal(err)
	}
	after := newManager(openKEK(""))
	if err := after.Keys.CheckKEK(ctx); err != nil {
		b.Fatal(err)
	}
	if st, err := after.Keys.KeyStatus(ctx); err != nil || st.Retired() != 0 {
		b.Fatalf("after the rotation: %+v, %v", st, err)
	}
	for _, r := range all {
		key, err := after.Catalog.BackupKey(ctx, "bench", r.owner, r.id)
		if err != nil {
			b.Fatalf("backup %s/%s: %v", r.owner, r.id, err)
		}
		row, err := st.GetBackup(ctx, r.owner, r.id)
		if err != nil {
			b.Fatal(err)
		}
		body, err := bucket.ReadAll(ctx, row.ObjectKey)
		if err != nil || !opens(body, key) {
			b.Fatalf("backup %s/%s does not open after the rotation: %v", r.owner, r.id, err)
		}
	}
	mean := func(d []time.Duration) time.Duration {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return sum / time.Duration(max(len(d), 1))
	}
	b.ReportMetric(float64(pass.Rotated)/elapsed.Seconds(), "owner-keys/s")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "backups-covered/s")
	b.ReportMetric(float64(len(during)), "jobs-during")
	b.ReportMetric(float64(mean(during))/float64(mean(baseline)), "job-time-vs-ceiling")
	b.Logf("rotated %d owner keys covering %d backups in %v; %d jobs during it, mean %v, against %v for %d jobs just before; 0 failed; all %d backups open under the new KEK alone",
		pass.Rotated, len(all), elapsed, len(during), mean(during), mean(baseline), len(baseline), len(all))
}
