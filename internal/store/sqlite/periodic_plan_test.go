package sqlite_test

import (
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestPeriodicQueriesAreFlat (issue 52): each statement a periodic loop
// runs across owners searches an index led by what makes a row due (a
// KEK other than the current one, when a job ended, a lease, an expiry)
// and scans no table or index whole, in a fleet where every owner has a
// key and a finished job and nothing is due.
func TestPeriodicQueriesAreFlat(t *testing.T) {
	s := open(t).(*sqlite.Store)
	const kek = "current-kek"
	storetest.FillQuiet(t, s, 300, 0, kek)
	if _, err := s.DB().ExecContext(t.Context(), "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	for _, q := range storetest.PeriodicQueries(kek, time.Now()) {
		plan := queryPlan(t, s, q.SQL, q.Args...)
		got := strings.Join(plan, "; ")
		searched := false
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN ") {
				t.Errorf("%s: %s; scans %q whole, want a search of an index led by what is due", q.Name, got, step)
			}
			searched = searched || strings.HasPrefix(step, "SEARCH ")
		}
		if !searched {
			t.Errorf("%s: %s; want a search", q.Name, got)
		}
		t.Logf("%s: %s", q.Name, got)
	}
}

// queryPlan is SQLite's plan for query, a step a line.
func queryPlan(t *testing.T, s *sqlite.Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.DB().QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return plan
}
