//go:build citus

// Package citus proves the server on a real Citus cluster while it
// serves: a worker stopped and started, and a worker added with the
// shards rebalanced, under writers over gRPC. make citus runs it (after
// scripts/ensure-citus.sh starts the cluster); RELIABILITY.md keeps its
// last figures.
package citus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/test/serving"
)

const token = "citus-test-token"

// clusterSh runs ../shared/citus/cluster.sh (CITUS_DIR when set).
func clusterSh(t *testing.T, args ...string) {
	t.Helper()
	dir := os.Getenv("CITUS_DIR")
	if dir == "" {
		dir = "../../../shared/citus"
		if _, err := os.Stat(dir); err != nil {
			dir = "/work/shared/citus"
		}
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(dir, "cluster.sh")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cluster.sh %v: %v\n%s", args, err, stderr.String())
	}
}

// nodeOf is the worker port holding owner's shard of groups (and so of
// every owner table: they are colocated).
func nodeOf(t *testing.T, db *pgx.Conn, owner string) int {
	t.Helper()
	var port int
	err := db.QueryRow(t.Context(), `SELECT nodeport FROM citus_shards
		WHERE table_name = 'groups'::regclass AND shardid = get_shard_id_for_distribution_column('groups', $1::text)`, owner).Scan(&port)
	if err != nil {
		t.Fatalf("the node of %s: %v", owner, err)
	}
	return port
}

// writers append to their owners' groups until stopped, one call at a
// time each, and keep what was acknowledged and how calls failed, by
// owner and by phase.
type writers struct {
	conv   cb.ConversationServiceClient
	owners []string

	mu      sync.Mutex
	phase   string
	acked   map[string][][]byte           // owner → message ids
	failed  map[string]map[codes.Code]int // phase → code → calls
	byOwner map[string]map[string]int     // phase → owner → failed calls
	okAt    map[string]time.Time          // owner → its last acknowledgement
	slowest map[string]time.Duration      // phase → the slowest failed call
	slowOK  map[string]time.Duration      // phase → the slowest acknowledged call
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startWriters(t *testing.T, conv cb.ConversationServiceClient, owners []string) *writers {
	t.Helper()
	w := &writers{conv: conv, owners: owners, phase: "before", acked: map[string][][]byte{},
		failed: map[string]map[codes.Code]int{}, byOwner: map[string]map[string]int{}, okAt: map[string]time.Time{},
		slowest: map[string]time.Duration{}, slowOK: map[string]time.Duration{}, stop: make(chan struct{})}
	for _, owner := range owners {
		group := storetest.MinimalGroup("citus " + owner)
		if _, err := conv.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: group}); err != nil {
			t.Fatal(err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-w.stop:
					return
				default:
				}
				id := sha256.Sum256([]byte(fmt.Sprint(owner, n)))
				m := storetest.Message(fmt.Sprint(owner, n), group.Id, int64(n))
				m.Id = id[:]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				_, err := conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: []*mb.GroupMessageSave{m}})
				took := time.Since(start)
				cancel()
				w.mu.Lock()
				if err == nil {
					w.acked[owner] = append(w.acked[owner], m.Id)
					w.okAt[owner] = time.Now()
					w.slowOK[w.phase] = max(w.slowOK[w.phase], took)
				} else {
					if w.failed[w.phase] == nil {
						w.failed[w.phase], w.byOwner[w.phase] = map[codes.Code]int{}, map[string]int{}
					}
					w.failed[w.phase][status.Code(err)]++
					w.byOwner[w.phase][owner]++
					w.slowest[w.phase] = max(w.slowest[w.phase], took)
				}
				w.mu.Unlock()
				if err != nil {
					time.Sleep(100 * time.Millisecond) // a client's backoff
				}
			}
		}()
	}
	return w
}

func (w *writers) enter(phase string) {
	w.mu.Lock()
	w.phase = phase
	w.mu.Unlock()
}

func (w *writers) halt() {
	close(w.stop)
	w.wg.Wait()
}

// lost counts the acknowledged messages a fresh store does not hold.
func (w *writers) lost(t *testing.T, url string) (lost, acked int) {
	t.Helper()
	check, err := postgres.Open(t.Context(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	for _, owner := range w.owners {
		stored := map[string]bool{}
		group := storetest.MinimalGroup("citus " + owner)
		q := store.MessageQuery{GroupID: group.Id, Limit: 10_000}
		for {
			page, err := check.ListMessages(t.Context(), owner, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range page.Messages {
				stored[string(m.Id)] = true
			}
			if len(page.Messages) < q.Limit {
				break
			}
			last := page.Messages[len(page.Messages)-1]
			q.After = &store.MessageCursor{SentAtNs: last.SentAtNs, ID: last.Id}
		}
		for _, id := range w.acked[owner] {
			acked++
			if !stored[string(id)] {
				lost++
			}
		}
	}
	return lost, acked
}

func codesOf(m map[codes.Code]int) string {
	var out []string
	for c, n := range m {
		out = append(out, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// TestCitusWorkerStoppedAndStarted: with writers for owners on both
// workers, worker 2 is stopped for 6 s and started again. The owners on
// worker 1 see no error; those on worker 2 get UNAVAILABLE only, quickly,
// and are served again once it is back; no acknowledged write is lost.
// Health stays SERVING: the replica serves every owner it can, and
// taking it out of a load balancer would serve none of them better.
func TestCitusWorkerStoppedAndStarted(t *testing.T) {
	url := storetest.NewPostgresDatabase(t)
	st, err := postgres.Open(t.Context(), url, postgres.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	conn := serving.Serve(t, st, token, nil)
	db, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())

	// Three owners on each worker.
	onNode := map[int][]string{}
	for i := 0; len(onNode[25433]) < 3 || len(onNode[25434]) < 3; i++ {
		owner := fmt.Sprintf("owner-%03d", i)
		if port := nodeOf(t, db, owner); len(onNode[port]) < 3 {
			onNode[port] = append(onNode[port], owner)
		}
	}
	stopped := map[string]bool{}
	for _, o := range onNode[25434] {
		stopped[o] = true
	}
	w := startWriters(t, cb.NewConversationServiceClient(conn), append(onNode[25433], onNode[25434]...))
	health := healthpb.NewHealthClient(conn)
	t.Cleanup(func() { clusterSh(t, "up") }) // whatever happens, the cluster is whole again

	time.Sleep(2 * time.Second)
	w.enter("stopped")
	clusterSh(t, "stop", "2")
	stoppedAt := time.Now()
	var notServing int
	for time.Since(stoppedAt) < 6*time.Second {
		resp, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: cb.ConversationService_ServiceDesc.ServiceName})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			notServing++
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.enter("restarted")
	clusterSh(t, "start", "2")
	startedAt := time.Now()
	// Served again: every owner of worker 2 acknowledged after the start.
	var back time.Duration
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		w.mu.Lock()
		all := true
		for _, o := range onNode[25434] {
			all = all && w.okAt[o].After(startedAt)
		}
		w.mu.Unlock()
		if all {
			back = time.Since(startedAt)
			break
		}
	}
	time.Sleep(time.Second)
	w.halt()

	w.mu.Lock()
	defer w.mu.Unlock()
	for phase, owners := range w.byOwner {
		for owner, n := range owners {
			if phase == "stopped" && !stopped[owner] {
				t.Errorf("owner %s, whose shard is on the running worker, had %d failed calls while worker 2 was down", owner, n)
			}
		}
	}
	for phase, byCode := range w.failed {
		for c, n := range byCode {
			if c != codes.Unavailable {
				t.Errorf("%s: %d calls failed %s; a worker that is down is UNAVAILABLE", phase, n, c)
			}
		}
	}
	if w.byOwner["stopped"] == nil {
		t.Errorf("no call failed while worker 2 was down: the test did not reach it")
	}
	if back == 0 {
		t.Errorf("the owners of worker 2 were not served again within 60 s of its start")
	}
	if notServing > 0 {
		t.Errorf("health was not SERVING %d times while worker 2 was down; it stays SERVING (see the comment)", notServing)
	}
	lost, acked := w.lost(t, url)
	if lost > 0 {
		t.Errorf("%d of %d acknowledged appends are lost", lost, acked)
	}
	t.Logf("worker 2 down 6 s under 6 writers: %d appends acknowledged, %d lost; while down: owners on worker 1 failed 0 calls, owners on worker 2 failed %s (the slowest in %.3f s); after the start: %s, served again in %.1f s; health SERVING throughout",
		acked, lost, codesOf(w.failed["stopped"]), w.slowest["stopped"].Seconds(), codesOf(w.failed["restarted"]), back.Seconds())
}

// TestCitusWorkerAddedAndRebalanced: the store starts on worker 1 alone;
// with writers running, worker 2 is added and the shards rebalanced
// online. No acknowledged write is lost, a failure is only UNAVAILABLE
// (a retry clears it), and half the shards end on worker 2.
func TestCitusWorkerAddedAndRebalanced(t *testing.T) {
	url := storetest.NewPostgresDatabase(t)
	db, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(t.Context(), "SELECT citus_remove_node('127.0.0.1', 25434)"); err != nil {
		t.Fatalf("start on worker 1 alone: %v", err)
	}
	st, err := postgres.Open(t.Context(), url, postgres.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	conn := serving.Serve(t, st, token, nil)
	var owners []string
	for i := range 8 {
		owners = append(owners, fmt.Sprintf("owner-%03d", i))
	}
	w := startWriters(t, cb.NewConversationServiceClient(conn), owners)

	time.Sleep(2 * time.Second)
	w.enter("rebalancing")
	start := time.Now()
	if _, err := db.Exec(t.Context(), "SELECT citus_add_node('127.0.0.1', 25434)"); err != nil {
		t.Fatal(err)
	}
	// Writes block while a shard group moves (block_writes: the cluster
	// runs without wal_level=logical); reads go on.
	if _, err := db.Exec(t.Context(), "SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(t.Context(), "SELECT citus_rebalance_wait()"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	w.enter("after")
	time.Sleep(2 * time.Second)
	w.halt()

	var onWorker2, all int
	if err := db.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE nodeport = 25434), count(*) FROM citus_shards WHERE table_name = 'groups'::regclass`).Scan(&onWorker2, &all); err != nil {
		t.Fatal(err)
	}
	if onWorker2 < all/2-1 {
		t.Errorf("after the rebalance %d of %d shards of groups are on worker 2; want about half", onWorker2, all)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for phase, byCode := range w.failed {
		for c, n := range byCode {
			if c != codes.Unavailable {
				t.Errorf("%s: %d calls failed %s; a rebalance's failures are UNAVAILABLE", phase, n, c)
			}
		}
	}
	lost, acked := w.lost(t, url)
	if lost > 0 {
		t.Errorf("%d of %d acknowledged appends are lost", lost, acked)
	}
	t.Logf("worker 2 added and %d of %d shard groups moved to it in %.1f s under 8 writers: %d appends acknowledged, %d lost; failed calls while rebalancing: %s; the slowest acknowledged append while rebalancing %.2f s (before %.3f s; a shard group's writes wait while it moves); after: %s",
		onWorker2, all, took.Seconds(), acked, lost, codesOf(w.failed["rebalancing"]), w.slowOK["rebalancing"].Seconds(), w.slowOK["before"].Seconds(), codesOf(w.failed["after"]))
}
