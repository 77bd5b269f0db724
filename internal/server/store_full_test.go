package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"syscall"
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
	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// fullStore is a store whose room can be run out of and then freed.
type fullStore struct {
	store.Store
	engine string
	free   func(t *testing.T)
}

// sqliteFull caps the database file at 2,000 pages (8 MiB), SQLite's own
// SQLITE_FULL, and frees it by lifting the cap.
func sqliteFull(t *testing.T) fullStore {
	s, err := sqlite.Open(t.Context(), t.TempDir(), sqlite.Options{Migrate: true, MaxPages: 2000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return fullStore{Store: s, engine: "sqlite", free: func(t *testing.T) {
		if err := s.SetMaxPages(context.Background(), 1<<30); err != nil {
			t.Fatal(err)
		}
	}}
}

// postgresFull puts the test database in a tablespace on a 16 MiB tmpfs,
// a real full disk for Postgres (disk_full, 53100), freed by growing the
// tmpfs. It needs root (mount) and the Postgres server on this machine,
// as make test has it.
func postgresFull(t *testing.T) fullStore {
	if os.Geteuid() != 0 {
		t.Fatal("the Postgres full-disk test mounts a tmpfs and needs root, as CI runs it")
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("the postgres user: %v", err)
	}
	dir, err := os.MkdirTemp("", "cb-full-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700,uid="+pgUser.Uid+",gid="+pgUser.Gid, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs for the tablespace: %v %s", err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH); _ = os.Remove(dir) })
	admin := os.Getenv(storetest.AdminURLEnv)
	if admin == "" {
		t.Fatalf("%s is not set", storetest.AdminURLEnv)
	}
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := "cbfull_" + strings.ToLower(rand.Text()[:12])
	for _, q := range []string{
		"CREATE TABLESPACE " + name + " LOCATION '" + dir + "'",
		"CREATE DATABASE " + name + " TABLESPACE " + name,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_, _ = c.Exec(ctx, "DROP TABLESPACE IF EXISTS "+name)
	})
	// Room first, whatever the test did: a full tablespace fails every
	// checkpoint in the cluster, and so other tests' DROP DATABASE.
	t.Cleanup(func() { _ = exec.Command("mount", "-o", "remount,size=256m", dir).Run() })
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	s, err := postgres.Open(ctx, u.String(), postgres.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return fullStore{Store: s, engine: "postgres", free: func(t *testing.T) {
		if out, err := exec.Command("mount", "-o", "remount,size=256m", dir).CombinedOutput(); err != nil {
			t.Fatalf("grow the tmpfs: %v %s", err, out)
		}
	}}
}

// TestReliability10_StoreFull: on either engine, a write the store has no
// room for is RESOURCE_EXHAUSTED naming the store, writes nothing of its
// batch, and turns health NOT_SERVING; reads go on; once room is freed a
// write succeeds, health is SERVING again, and appends work, with no
// restart.
func TestReliability10_StoreFull(t *testing.T) {
	for name, open := range map[string]func(*testing.T) fullStore{"sqlite": sqliteFull, "postgres": postgresFull} {
		t.Run(name, func(t *testing.T) {
			fs := open(t)
			conn := startTCP(t, Config{Store: fs, StoreCheckInterval: 200 * time.Millisecond})
			c := cb.NewConversationServiceClient(conn)
			hc := healthpb.NewHealthClient(conn)
			ctx := t.Context()
			put(t, c, "o", storetest.FullGroup("g"))
			waitHealth := func(want healthpb.HealthCheckResponse_ServingStatus) time.Duration {
				t.Helper()
				start := time.Now()
				for deadline := start.Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: cb.ConversationService_ServiceDesc.ServiceName})
					if err == nil && resp.GetStatus() == want {
						return time.Since(start)
					}
					if time.Now().After(deadline) {
						t.Fatalf("health: %v %v; want %v", resp, err, want)
					}
				}
			}
			batch := func(n int) []*mb.GroupMessageSave {
				msgs := storetest.Messages(fmt.Sprintf("m%d-", n), storetest.GroupID("g"), 25, int64(n)*100)
				for _, m := range msgs {
					m.SenderInboxId = "o"
					m.DecryptedMessageBytes = make([]byte, 32<<10)
					_, _ = rand.Read(m.DecryptedMessageBytes)
				}
				return msgs
			}
			acked, calls := 0, 0
			var refused error
			for calls = 1; calls <= 400; calls++ {
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: "o", Messages: batch(calls)})
				if err != nil {
					refused = err
					break
				}
				acked += 25
			}
			if status.Code(refused) != codes.ResourceExhausted || !strings.Contains(status.Convert(refused).Message(), "store ("+fs.engine+") is out of space") {
				t.Fatalf("after %d appends (%d messages): %v; want RESOURCE_EXHAUSTED naming the %s store", calls, acked, refused, fs.engine)
			}
			notReady := waitHealth(healthpb.HealthCheckResponse_NOT_SERVING)
			// Reads go on, and the refused batch left nothing.
			if got := countMessages(t, c, "o", "g"); got != acked {
				t.Errorf("%d messages stored; %d were acknowledged (the refused batch must leave none)", got, acked)
			}
			fs.free(t)
			ready := waitHealth(healthpb.HealthCheckResponse_SERVING)
			if _, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: "o", Messages: batch(calls)}); err != nil {
				t.Fatalf("append once room is freed: %v", err)
			}
			t.Logf("%s: full after %d messages (%d calls); NOT_SERVING %v later; SERVING %v after room was freed",
				fs.engine, acked, calls, notReady.Round(time.Millisecond), ready.Round(time.Millisecond))
		})
	}
}

func countMessages(t *testing.T, c cb.ConversationServiceClient, owner, group string) int {
	t.Helper()
	n := 0
	req := &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID(group), PageSize: 200}
	for {
		resp, err := c.ListMessages(t.Context(), req)
		if err != nil {
			t.Fatalf("ListMessages: %v", err)
		}
		n += len(resp.GetMessages())
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return n
		}
	}
}
