//go:build ha

// Package ha proves the server on a highly available Postgres: a real
// failover of Debian's pg_auto_failover (scripts/ha-cluster.sh: a monitor
// and two nodes, synchronous replication) under writers over gRPC. It
// needs root or the postgres user and takes about a minute: make ha runs
// it, and RELIABILITY.md keeps its last figures.
package ha

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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

const token = "ha-test-token"

func cluster(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"../../scripts/ha-cluster.sh"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ha-cluster.sh %v: %v\n%s", args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func messageID(writer, n int) []byte {
	s := sha256.Sum256([]byte(fmt.Sprintf("ha %d %d", writer, n)))
	return s[:]
}

// TestFailover: writers append over gRPC through a multi-host URL while
// the primary node is killed. Every acknowledged message is on the new
// primary, every failed call is UNAVAILABLE (the client retries it; the
// retry is idempotent by message id), health goes NOT_SERVING and back,
// and the server is never restarted.
func TestFailover(t *testing.T) {
	t.Cleanup(func() { cluster(t, "down") })
	url := cluster(t, "up")
	ctx := t.Context()
	st, err := postgres.Open(ctx, url, postgres.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var logBuf syncBuffer
	logger := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(&logBuf), zap.WarnLevel))
	conn := serving.Serve(t, st, token, logger)
	defer func() {
		if t.Failed() {
			t.Logf("server log (warnings and errors):\n%s", logBuf.String())
		}
	}()
	conv := cb.NewConversationServiceClient(conn)
	health := healthpb.NewHealthClient(conn)
	owner := "ha-owner"
	group := storetest.MinimalGroup("ha")
	if _, err := conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: group}); err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		acked    [][]byte
		failed   = map[codes.Code]int{}
		retry    []*mb.GroupMessageSave
		firstOK  time.Time // the first acknowledgement after the kill
		killedAt time.Time
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const writers = 4
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				m := storetest.Message(hex.EncodeToString(messageID(w, n)), group.Id, int64(w*1_000_000+n))
				m.Id = messageID(w, n)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				mu.Lock()
				afterKill := !killedAt.IsZero()
				mu.Unlock()
				_, err := conv.AppendMessages(cctx, &cb.AppendMessagesRequest{Owner: owner, Messages: []*mb.GroupMessageSave{m}})
				cancel()
				mu.Lock()
				if err == nil {
					acked = append(acked, m.Id)
					// Writable again: a call begun after the kill succeeded.
					if afterKill && firstOK.IsZero() {
						firstOK = time.Now()
					}
				} else {
					failed[status.Code(err)]++
					retry = append(retry, m)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(100 * time.Millisecond) // a client's backoff
				}
			}
		}()
	}
	// Health, as a load balancer would poll it.
	type change struct {
		at     time.Time
		status healthpb.HealthCheckResponse_ServingStatus
	}
	var changes []change
	healthDone := make(chan struct{})
	go func() {
		defer close(healthDone)
		last := healthpb.HealthCheckResponse_SERVING
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := health.Check(cctx, &healthpb.HealthCheckRequest{Service: cb.ConversationService_ServiceDesc.ServiceName})
			cancel()
			if err == nil && resp.GetStatus() != last {
				last = resp.GetStatus()
				changes = append(changes, change{time.Now(), last})
			}
		}
	}()

	time.Sleep(3 * time.Second)
	killed := cluster(t, "kill")
	mu.Lock()
	before := len(acked)
	killedAt = time.Now()
	mu.Unlock()
	t.Logf("killed the primary on port %s after %d acknowledged appends", killed, before)
	deadline := time.Now().Add(90 * time.Second)
	for {
		mu.Lock()
		ok := !firstOK.IsZero()
		mu.Unlock()
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // writes go on against the new primary
	close(stop)
	wg.Wait()
	<-healthDone

	mu.Lock()
	defer mu.Unlock()
	if firstOK.IsZero() {
		t.Fatalf("no write succeeded within 90 s of the kill; failures %v\n%s", failed, cluster(t, "state"))
	}
	writable := firstOK.Sub(killedAt)

	// Every acknowledged message is on the new primary, read through a
	// fresh pool.
	check, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	stored := map[string]bool{}
	q := store.MessageQuery{GroupID: group.Id, Limit: 10_000}
	for {
		page, err := check.ListMessages(ctx, owner, q)
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
	lost := 0
	for _, id := range acked {
		if !stored[string(id)] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged appends are not on the new primary", lost, len(acked))
	}
	var codesSeen []string
	for c, n := range failed {
		codesSeen = append(codesSeen, fmt.Sprintf("%s %d", c, n))
		if c != codes.Unavailable {
			t.Errorf("%d failed calls were %s; every failure during a failover is UNAVAILABLE", n, c)
		}
	}
	sort.Strings(codesSeen)

	// Health went NOT_SERVING and came back.
	var down, back time.Duration
	for _, c := range changes {
		switch {
		case c.status != healthpb.HealthCheckResponse_SERVING && down == 0:
			down = c.at.Sub(killedAt)
		case c.status == healthpb.HealthCheckResponse_SERVING && down != 0 && back == 0:
			back = c.at.Sub(killedAt)
		}
	}
	if down == 0 || back == 0 {
		t.Errorf("health changes %v: want NOT_SERVING after the kill and SERVING again", changes)
	}

	// A failed write retried as it was sent is safe: it is stored once,
	// whether its first attempt committed or not.
	inserted, unchanged := 0, 0
	for _, m := range retry {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := conv.AppendMessages(cctx, &cb.AppendMessagesRequest{Owner: owner, Messages: []*mb.GroupMessageSave{m}})
		cancel()
		if err != nil {
			t.Fatalf("retry of a failed append: %v\n%s", err, cluster(t, "state"))
		}
		inserted += int(resp.GetInserted())
		unchanged += int(resp.GetUnchanged())
	}
	t.Logf("acknowledged %d (%d before the kill), all present: %v; failed calls: %s; writable again %.1f s after the kill; health NOT_SERVING at %.1f s, SERVING at %.1f s; %d failed writes retried: %d inserted, %d already there",
		len(acked), before, lost == 0, strings.Join(codesSeen, ", "), writable.Seconds(), down.Seconds(), back.Seconds(), len(retry), inserted, unchanged)
}

// syncBuffer is a buffer the server's logger writes to from many
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
