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

// TestErasureCoversEveryOwnerTable (issue 37): every table of the schema
// with an owner column is one an erasure deletes from, read from the
// schema (sqlite_schema and each table's columns).
func TestErasureCoversEveryOwnerTable(t *testing.T) {
	db := open(t).(*sqlite.Store).DB()
	rows, err := db.QueryContext(t.Context(),
		`SELECT m.name FROM sqlite_schema m JOIN pragma_table_info(m.name) c WHERE m.type = 'table' AND c.name = 'owner' ORDER BY m.name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var withOwner []string
	for rows.Next() {
		var table string
		if err := rows.Scan(&table); err != nil {
			t.Fatal(err)
		}
		withOwner = append(withOwner, table)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	storetest.CheckErasureCovers(t, withOwner)
}
