package postgres_test

import (
	"context"
	"testing"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
	"github.com/contentbackup/contentbackup/migrations"
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

// TestEveryTableHasADistribution: each table the migrations make is an
// owner table (distributed by owner on Citus) or a server table (left on
// the coordinator); a migration adding a table fails here until it is
// put in one of migrations.OwnerTables and migrations.ServerTables.
func TestEveryTableHasADistribution(t *testing.T) {
	s := open(t)
	known := map[string]bool{}
	for _, table := range append(append([]string{}, migrations.OwnerTables...), migrations.ServerTables...) {
		known[table] = true
	}
	rows, err := s.(*postgres.Store).Pool().Query(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var table string
		if err := rows.Scan(&table); err != nil {
			t.Fatal(err)
		}
		n++
		if !known[table] {
			t.Errorf("table %s is in neither migrations.OwnerTables nor migrations.ServerTables: say how Citus holds it", table)
		}
	}
	if n != len(known) {
		t.Errorf("%d tables in the schema, %d named: a named table no migration makes?", n, len(known))
	}
}

// TestErasureCoversEveryOwnerTable (issue 37): every table of the schema
// with an owner column is one an erasure deletes from
// (store.OwnerRowTables), read from the schema itself, so a table added
// later with owner rows fails here until erasure covers it.
func TestErasureCoversEveryOwnerTable(t *testing.T) {
	s := open(t)
	rows, err := s.(*postgres.Store).Pool().Query(t.Context(),
		`SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' AND column_name = 'owner' ORDER BY table_name`)
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
	storetest.CheckErasureCovers(t, withOwner)
}
