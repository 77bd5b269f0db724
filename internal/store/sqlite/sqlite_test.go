package sqlite_test

import (
	"context"
	"testing"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// open is this engine's opener, handed to the conformance suite: a store
// in a new temporary data directory.
func open(t testing.TB) store.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), t.TempDir(), sqlite.Options{Migrate: true})
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}
