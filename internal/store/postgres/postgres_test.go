package postgres_test

import (
	"context"
	"testing"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// open is this engine's opener, handed to the conformance suite: a store
// in a new database of the server storetest.AdminURLEnv names, dropped
// when the test ends.
func open(t testing.TB) store.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), storetest.NewPostgresDatabase(t), postgres.Options{Migrate: true})
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}
