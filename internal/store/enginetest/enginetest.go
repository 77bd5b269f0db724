// Package enginetest opens a fresh store of each engine for tests outside
// the store packages, which run against both (the engines' own tests hand
// their openers to storetest.Run themselves).
package enginetest

import (
	"context"
	"testing"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// Engine names a store engine and opens a fresh, empty, migrated store of
// it for one test.
type Engine struct {
	Name string
	Open func(t testing.TB) store.Store
}

// Engines is every engine, for tests that run against each.
func Engines() []Engine {
	return []Engine{{"sqlite", SQLite}, {"postgres", Postgres}}
}

// SQLite opens a store in a new temporary data directory.
func SQLite(t testing.TB) store.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), t.TempDir(), sqlite.Options{Migrate: true})
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Postgres creates a new database on the server storetest.AdminURLEnv names, opens a
// store in it and drops the database when the test ends. Without the
// variable the test fails: Postgres tests never skip.
func Postgres(t testing.TB) store.Store {
	t.Helper()
	dbURL := storetest.NewPostgresDatabase(t)
	s, err := postgres.Open(context.Background(), dbURL, postgres.Options{Migrate: true})
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
