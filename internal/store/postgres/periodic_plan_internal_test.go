package postgres

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestPeriodicQueriesAreFlat (issue 52): with nothing due, each statement
// a periodic loop runs across owners (the key worker's counts and pages,
// the sweep of finished jobs, job takeover, the history sweep) reads the
// same buffers for a fleet of 500 owners as for one of 2,000, every owner
// with a key and a finished job. Before, the key worker counted and paged
// every owner's key and the job sweep read every finished job kept.
func TestPeriodicQueriesAreFlat(t *testing.T) {
	s, err := Open(t.Context(), storetest.NewPostgresDatabase(t), Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const kek = "current-kek"
	read := map[string]map[int]int{}
	filled := 0
	for _, owners := range []int{500, 2000} {
		storetest.FillQuiet(t, s, owners-filled, filled, kek)
		filled = owners
		if _, err := s.pool.Exec(t.Context(), "ANALYZE"); err != nil {
			t.Fatal(err)
		}
		for _, q := range storetest.PeriodicQueries(kek, time.Now()) {
			if read[q.Name] == nil {
				read[q.Name] = map[int]int{}
			}
			var plan string
			if err := s.pool.QueryRow(t.Context(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+dollars(q.SQL), q.Args...).Scan(&plan); err != nil {
				t.Fatalf("%s: %v", q.Name, err)
			}
			var parsed []struct {
				Plan planNode `json:"Plan"`
			}
			if err := json.Unmarshal([]byte(plan), &parsed); err != nil {
				t.Fatal(err)
			}
			read[q.Name][owners] = parsed[0].Plan.SharedHit + parsed[0].Plan.SharedRead
		}
	}
	for name, n := range read {
		t.Logf("%s: buffers with nothing due, by owners: %v", name, n)
		if n[2000] > n[500]+2 || n[2000] > 12 {
			t.Errorf("%s reads with the fleet: %v buffers by owners, nothing due", name, n)
		}
	}
}

// dollars writes a statement's ? placeholders as Postgres' $n.
func dollars(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
