package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	bin := buildServer(t)
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
			a := &jobServer{bin: bin, env: fleetEnv(t, url, dir, "", "SCHEDULE="+schedule)}
			conn := a.start(t)
			conv := cb.NewConversationServiceClient(conn)
			g := storetest.FullGroup("g")
			if _, err := conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: "alice", Group: g}); err != nil {
				t.Fatal(err)
			}
			if _, err := conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: "alice", Messages: storetest.Messages("m", g.GetId(), 20, 1000)}); err != nil {
				t.Fatal(err)
			}
			b := &jobServer{bin: bin, env: fleetEnv(t, url, dir, "", "SCHEDULE="+schedule, fmt.Sprintf("SCHEDULE_CLOCK_OFFSET=%s", c.offset))}
			b.start(t)
			time.Sleep(60 * time.Second)
			for _, s := range []*jobServer{a, b} {
				_ = s.proc.Signal(syscall.SIGTERM)
				_, _ = s.proc.Wait()
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

// TestFleetJobSurvivesAReplica: a replica SIGKILLed mid-export leaves its
// job to its lease, and the other replica of the fleet takes it over and
// finishes it: one complete backup, its object matching its summary.
func TestFleetJobSurvivesAReplica(t *testing.T) {
	bin := buildServer(t)
	gw, gwAddr := startGateway(t)
	th := startThrottle(t, gwAddr)
	url := storetest.NewPostgresDatabase(t)
	dir := t.TempDir()
	a := &jobServer{bin: bin, env: fleetEnv(t, url, dir, th.addr)}
	b := &jobServer{bin: bin, env: fleetEnv(t, url, dir, th.addr)}
	connA := a.start(t)
	connB := b.start(t)
	fillLarge(t, connA, "alice")
	th.rate.Store(1 << 20)
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
