package storetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdminURLEnv names the variable holding a Postgres URL with the right to
// create databases; make test sets it (scripts/ensure-postgres.sh).
const AdminURLEnv = "TEST_DATABASE_URL"

// CitusWorkersEnv, when set, says the server AdminURLEnv names is a
// Citus coordinator, and lists its workers as host:port,host:port (make
// citus sets both, from scripts/ensure-citus.sh): each test's database is
// then made on every node, with the extension and the workers registered,
// so that the store distributes its tables when it migrates.
const CitusWorkersEnv = "TEST_CITUS_WORKERS"

// Citus reports whether the Postgres tests run on a Citus cluster.
func Citus() bool { return os.Getenv(CitusWorkersEnv) != "" }

// NewPostgresDatabase creates an empty database for the test and returns
// its URL; the database is dropped when the test ends. Without
// AdminURLEnv the test fails: Postgres tests never skip.
func NewPostgresDatabase(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(AdminURLEnv)
	if admin == "" {
		t.Fatalf("%s is not set: run the tests with make test, which starts PostgreSQL, or set it to a postgres:// URL that may create databases", AdminURLEnv)
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("%s: %v", AdminURLEnv, err)
	}
	nodes := []*url.URL{u}
	var workers []string
	if w := os.Getenv(CitusWorkersEnv); w != "" {
		workers = strings.Split(w, ",")
		for _, hostport := range workers {
			wu := *u
			wu.Host = hostport
			nodes = append(nodes, &wu)
		}
	}
	name := "cbtest_" + strings.ToLower(rand.Text())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, node := range nodes {
		exec(ctx, t, node.String(), "CREATE DATABASE "+name)
	}
	t.Cleanup(func() { dropEverywhere(t, nodes, name) })
	if len(workers) > 0 {
		for _, node := range nodes {
			db := *node
			db.Path = "/" + name
			exec(ctx, t, db.String(), "CREATE EXTENSION citus")
		}
		db := *u
		db.Path = "/" + name
		// Registering nodes copies the role to each worker, and two
		// databases registering at once (test packages run in parallel)
		// race on it there ("tuple concurrently updated"): one at a time
		// across processes, and once more if it still collides.
		unlock := lockFile(t, filepath.Join(os.TempDir(), "contentbackup-citus-register.lock"))
		defer unlock()
		host, port := splitHostPort(t, u.Host)
		exec(ctx, t, db.String(), fmt.Sprintf("SELECT citus_set_coordinator_host('%s', %s)", host, port))
		for _, w := range workers {
			host, port := splitHostPort(t, w)
			execRetried(ctx, t, db.String(), fmt.Sprintf("SELECT citus_add_node('%s', %s)", host, port))
		}
	}
	out := *u
	out.Path = "/" + name
	return out.String()
}

func splitHostPort(t testing.TB, hostport string) (host, port string) {
	t.Helper()
	i := strings.LastIndex(hostport, ":")
	if i < 0 {
		return hostport, "5432"
	}
	return hostport[:i], hostport[i+1:]
}

// exec runs one statement on its own connection to url.
func exec(ctx context.Context, t testing.TB, url, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect for %q: %v", sql, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// execRetried is exec, tried up to three times: citus_add_node is
// idempotent, and its failure under a concurrent one is transient.
func execRetried(ctx context.Context, t testing.TB, url, sql string) {
	t.Helper()
	var err error
	for attempt := range 3 {
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, url); err == nil {
			_, err = conn.Exec(ctx, sql)
			conn.Close(ctx)
		}
		if err == nil {
			return
		}
		time.Sleep(time.Duration(attempt+1) * 300 * time.Millisecond)
	}
	t.Fatalf("%s: %v", sql, err)
}

// lockFile holds an exclusive lock on path until the returned unlock.
func lockFile(t testing.TB, path string) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("lock %s: %v", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
}

func dropEverywhere(t testing.TB, nodes []*url.URL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, node := range nodes {
		conn, err := pgx.Connect(ctx, node.String())
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			continue
		}
		// DROP DATABASE asks for a checkpoint, which fails while another
		// test holds a tablespace full on purpose
		// (TestReliability10_StoreFull): retry for as long as that lasts.
		for range 30 {
			if _, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		conn.Close(ctx)
	}
}
