package storetest

import (
	"context"
	"crypto/rand"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdminURLEnv names the variable holding a Postgres URL with the right to
// create databases; make test sets it (scripts/ensure-postgres.sh).
const AdminURLEnv = "TEST_DATABASE_URL"

// NewPostgresDatabase creates an empty database for the test and returns
// its URL; the database is dropped when the test ends.
func NewPostgresDatabase(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(AdminURLEnv)
	if admin == "" {
		t.Fatalf("%s is not set: run the tests with make test, which starts PostgreSQL, or set it to a postgres:// URL that may create databases", AdminURLEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to %s: %v", AdminURLEnv, err)
	}
	defer conn.Close(ctx)
	name := "cbtest_" + strings.ToLower(rand.Text())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		// DROP DATABASE asks for a checkpoint, which fails while another
		// test holds a tablespace full on purpose
		// (TestReliability10_StoreFull): retry for as long as that lasts.
		for range 30 {
			if _, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err == nil {
				return
			}
			time.Sleep(time.Second)
		}
		t.Errorf("drop database %s: %v", name, err)
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("%s: %v", AdminURLEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}
