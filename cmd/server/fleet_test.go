package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// A fleet here is replicas of the built server, each its own process, on
// one Postgres database, sharing a bucket and a key-encryption key, as
// replicas behind a load balancer do.

var fleetKEK = "base64key://" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))

// fleetEnv is the environment of every replica of a fleet on database
// url, with bucket "local" at dir and "s3" at s3Endpoint when it is set.
func fleetEnv(t *testing.T, url, dir, s3Endpoint string, extra ...string) []string {
	t.Helper()
	buckets := "local=file://" + dir + "?no_tmp_dir=1&metadata=skip"
	if s3Endpoint != "" {
		buckets += ",s3=s3://" + s3Bucket + "?endpoint=http://" + s3Endpoint + "&region=us-east-1&use_path_style=true"
	}
	return append([]string{
		"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=", "LOG_FORMAT=json", "DATA_DIR=" + t.TempDir(), "DATABASE_URL=" + url,
		"JOB_BUCKETS=" + buckets, "JOB_KEY_KEEPER=" + fleetKEK, "JOB_LEASE=2s", "AUTH_POLICY=" + jobPolicy(t),
		"AWS_ACCESS_KEY_ID=" + s3Access, "AWS_SECRET_ACCESS_KEY=" + s3Secret, "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}, extra...)
}

// TestFleetSchedulesFireOncePerTick: two replicas on one database, each
// firing the same `@every 5s` schedule for a minute, write exactly the
// archives one replica would: one per tick, every tick, none twice; also
// when one replica's clock is 3 s ahead or behind.
func TestFleetSchedulesFireOncePerTick(t *testing.T) {
	for _, c := range []struct {
		name   string
		offset time.Duration
	}{{"clocks agree", 0}, {"one clock 3s ahead", 3 * time.Second}, {"one clock 3s behind", -3 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := storetest.NewPostgresDatabase(t)
			dir := t.TempDir()
			schedule := filepath.Join(t.TempDir(), "schedule.yaml")
			policy := "schedules:\n  - name: fleet\n    cron: '@every 5s'\n    owners: [alice]\n    bucket: local\n    keep: 1000\n"
			if err := os.WriteFile(schedule, []byte(policy), 0o600); err != nil {
				t.Fatal(err)
			}
			a := &jobServer{env: fleetEnv(t, url, dir, "", "SCHEDULE="+schedule)}
			conn := a.start(t)
			conv := cb.NewConversationServiceClient(conn)
			g := storetest.FullGroup("g")
			if _, err := conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: "alice", Group: g}); err != nil {
				t.Fatal(err)
			}
			if _, err := conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: "alice", Messages: storetest.Messages("m", g.GetId(), 20, 1000)}); err != nil {
				t.Fatal(err)
			}
			offset := c.offset
			b := &jobServer{env: fleetEnv(t, url, dir, "", "SCHEDULE="+schedule), adjust: func(c *cli) {
				c.Serve.scheduleClock = func() time.Time { return time.Now().Add(offset) }
			}}
			b.start(t)
			time.Sleep(60 * time.Second)
			for _, s := range []*jobServer{a, b} {
				s.stop()
			}
			ticks, claimers := claimedTicks(t, url)
			complete, writing := fleetBackups(t, url)
			objects := archivesIn(t, filepath.Join(dir, "alice"))
			t.Logf("%s: %d ticks claimed (by replica: %v), %d backups complete, %d objects", c.name, len(ticks), claimers, complete, objects)
			if len(ticks) < 10 || len(ticks) > 14 {
				t.Errorf("%d ticks claimed in a minute of @every 5s, want about 12", len(ticks))
			}
			for i := 1; i < len(ticks); i++ {
				if gap := ticks[i] - ticks[i-1]; gap != int64(5*time.Second) {
					t.Errorf("ticks %d and %d are %s apart: a tick was missed", i-1, i, time.Duration(gap))
				}
			}
			// Each claimed tick wrote one archive; the last may have been
			// cut by the shutdown, which leaves neither row nor object.
			if complete != len(ticks) && complete != len(ticks)-1 || writing != 0 {
				t.Errorf("%d backups complete and %d writing for %d ticks, want one complete per tick", complete, writing, len(ticks))
			}
			if objects != complete {
				t.Errorf("%d archives in the bucket for %d complete backups", objects, complete)
			}
		})
	}
}

func pgConnect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return db
}

// claimedTicks are the fleet schedule's ticks for alice, in order, and
// how many each replica claimed.
func claimedTicks(t *testing.T, url string) ([]int64, map[string]int) {
	t.Helper()
	rows, err := pgConnect(t, url).Query(t.Context(), `SELECT tick_ns, claimed_by FROM schedule_ticks WHERE owner = 'alice' AND schedule = 'fleet' ORDER BY tick_ns`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ticks []int64
	by := map[string]int{}
	for rows.Next() {
		var tick int64
		var claimer string
		if err := rows.Scan(&tick, &claimer); err != nil {
			t.Fatal(err)
		}
		ticks = append(ticks, tick)
		by[claimer]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ticks, by
}

// fleetBackups counts alice's backups of the fleet schedule by state.
func fleetBackups(t *testing.T, url string) (complete, writing int) {
	t.Helper()
	err := pgConnect(t, url).QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE state = 'complete'), count(*) FILTER (WHERE state <> 'complete') FROM backups WHERE owner = 'alice' AND schedule = 'fleet'`).Scan(&complete, &writing)
	if err != nil {
		t.Fatal(err)
	}
	return complete, writing
}

// archivesIn counts the archives under dir.
func archivesIn(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".xmtpbak") {
			n++
		}
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return n
}

// twoReplicas is a fleet of two built servers on one Postgres database
// and an S3 gateway behind a throttle, alice's 10 MiB of messages stored,
// and the throttle at 1 MiB/s so that an export is caught mid-way.
type twoReplicas struct {
	gw           gateway
	th           *throttle
	url          string
	a, b         *jobServer
	connA, connB *grpc.ClientConn
}

func startFleet(t *testing.T) twoReplicas {
	t.Helper()
	bin := buildServer(t)
	gw, gwAddr := startGateway(t)
	f := twoReplicas{gw: gw, th: startThrottle(t, gwAddr), url: storetest.NewPostgresDatabase(t)}
	dir := t.TempDir()
	f.a = &jobServer{bin: bin, env: fleetEnv(t, f.url, dir, f.th.addr)}
	f.b = &jobServer{bin: bin, env: fleetEnv(t, f.url, dir, f.th.addr)}
	f.connA, f.connB = f.a.start(t), f.b.start(t)
	fillLarge(t, f.connA, "alice")
	f.th.rate.Store(1 << 20)
	return f
}

// TestFleetJobSurvivesAReplica: a replica SIGKILLed mid-export leaves its
// job to its lease, and the other replica of the fleet takes it over and
// finishes it: one complete backup, its object matching its summary.
func TestFleetJobSurvivesAReplica(t *testing.T) {
	f := startFleet(t)
	gw, th, a, b, connA, connB := f.gw, f.th, f.a, f.b, f.connA, f.connB
	op := startExport(t, connA, "alice", "s3", "fleet")
	key := objectKey(t, op)
	waitTransferring(t, connA, op.GetName())
	if err := a.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = a.proc.Wait()
	th.rate.Store(0)
	noFile(t, gw.object(key))
	done := waitJob(t, connB, op.GetName())
	md := &cb.JobMetadata{}
	if err := done.GetMetadata().UnmarshalTo(md); err != nil {
		t.Fatal(err)
	}
	if done.GetError() != nil || md.GetAttempt() != 2 {
		t.Fatalf("the killed replica's export, on the other: %v\n%s", done, b.logs())
	}
	result := &cb.ExportJobResult{}
	if err := done.GetResponse().UnmarshalTo(result); err != nil {
		t.Fatal(err)
	}
	// The taking-over attempt wrote its own key; the killed one's aborted
	// upload left nothing.
	noFile(t, gw.object(key))
	key = jobs.AttemptKey(key, 2)
	object, err := os.ReadFile(gw.object(key))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(object); result.GetArchive().GetKey() != key || uint64(len(object)) != result.GetSummary().GetArchiveBytes() || !bytes.Equal(sum[:], result.GetSummary().GetSha256()) {
		t.Errorf("the taken-over export's object: %d bytes at %q; result %v", len(object), key, result)
	}
	if !strings.Contains(b.logs(), "job taken over") {
		t.Error("the surviving replica did not log the takeover")
	}
}

// TestFleetStaleReplicaPausedAcrossItsLease (issue 33, finding 1): a
// replica paused (SIGSTOP) after committing its export's object, while
// its catalog commit waits in Postgres, loses its lease; the other
// replica takes the job over and commits the backup. When the paused one
// resumes, its catalog commit fails (the test cancels the statement it
// left waiting) and it cleans up after itself: it must delete only its
// own attempt's object, never the backup its successor committed. The
// backup stays complete, its object's digest the catalog's, and it
// restores. (Before attempts were fenced, both attempts wrote one key and
// the resumed replica deleted its successor's object.)
func TestFleetStaleReplicaPausedAcrossItsLease(t *testing.T) {
	f := startFleet(t)
	gw, th, url, a, b, connA, connB := f.gw, f.th, f.url, f.a, f.b, f.connA, f.connB
	op := startExport(t, connA, "alice", "s3", "paused")
	md := &cb.JobMetadata{}
	if err := op.GetMetadata().UnmarshalTo(md); err != nil {
		t.Fatal(err)
	}
	backupID := md.GetBackup()

	// Hold the backup's row, so replica a's catalog commit waits on it
	// once its object is committed.
	db := pgConnect(t, url)
	tx, err := db.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM backups WHERE owner = 'alice' AND id = $1 FOR UPDATE`, backupID); err != nil {
		t.Fatal(err)
	}
	th.rate.Store(0)
	watcher := pgConnect(t, url)
	// The statement waiting on the row: on Citus the wait is on the
	// worker holding the shard, and citus_lock_waits names it by its
	// global pid, which Citus's pg_cancel_backend takes.
	waitQuery := `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%backups%' LIMIT 1`
	if storetest.Citus() {
		waitQuery = `SELECT waiting_gpid FROM citus_lock_waits LIMIT 1`
	}
	var waiting int64
	for deadline := time.Now().Add(60 * time.Second); waiting == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replica a never reached its catalog commit:\n%s", a.logs())
		}
		err := watcher.QueryRow(t.Context(), waitQuery).Scan(&waiting)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	// Replica a pauses; the statement it left waiting is cancelled, and
	// the row let go: a sees the failure only when it resumes.
	if err := a.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cancel := `SELECT pg_cancel_backend($1::int)`
	if storetest.Citus() {
		cancel = `SELECT pg_cancel_backend($1::bigint)`
	}
	if _, err := watcher.Exec(t.Context(), cancel, waiting); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Replica b takes the job over once a's lease runs out, and commits.
	done := waitJob(t, connB, op.GetName())
	if err := done.GetMetadata().UnmarshalTo(md); err != nil {
		t.Fatal(err)
	}
	if done.GetError() != nil || md.GetAttempt() != 2 {
		t.Fatalf("the paused replica's export, on the other: %v\n%s", done, b.logs())
	}

	// Replica a resumes, finds its commit failed and its job lost.
	if err := a.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	gaveUp := func() bool {
		return strings.Contains(a.logs(), "job lost") || strings.Contains(a.logs(), "job end not recorded")
	}
	for deadline := time.Now().Add(30 * time.Second); !gaveUp(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the resumed replica never gave the job up:\n%s", a.logs())
		}
	}
	time.Sleep(time.Second) // its cleanup, had it one to make, is made by now

	bs := cb.NewBackupServiceClient(connB)
	bk, err := bs.GetBackup(t.Context(), &cb.GetBackupRequest{Owner: "alice", Backup: backupID})
	if err != nil || bk.GetState() != cb.BackupState_BACKUP_STATE_COMPLETE {
		t.Fatalf("the backup after the stale replica resumed: %v, %v", bk, err)
	}
	object, err := os.ReadFile(gw.object(bk.GetObject().GetKey()))
	if err != nil {
		t.Fatalf("the committed backup's object after the stale replica resumed: %v\n%s", err, a.logs())
	}
	if sum := sha256.Sum256(object); uint64(len(object)) != bk.GetSummary().GetArchiveBytes() || !bytes.Equal(sum[:], bk.GetSummary().GetSha256()) {
		t.Fatalf("the object is %d bytes, digest %x; the catalog says %d, %x", len(object), sum, bk.GetSummary().GetArchiveBytes(), bk.GetSummary().GetSha256())
	}
	restore, err := bs.StartImport(t.Context(), &cb.StartImportRequest{Owner: "carol", SourceOwner: "alice", Backup: backupID})
	if err != nil {
		t.Fatal(err)
	}
	if got := waitJob(t, connB, restore.GetName()); got.GetError() != nil {
		t.Fatalf("restoring the backup: %v", got.GetError())
	}
}
