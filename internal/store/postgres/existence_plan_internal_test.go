package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestAppendLookupIsBoundedByTheBatch (issue 52): an append's look for
// the ids its owner already has (and MessagesExist, an import plan's,
// which asks it in the same statement) reads in proportion to the batch, not to
// the owner, under the plan a pooled connection's cached statement may
// fall into: a forced generic plan, for an owner of 1,000 messages and of
// 30,000. The form it had (owner = $1 AND id = ANY($2)) became "Index
// Cond: owner, Filter: id" under a generic plan and read every message of
// a large owner.
func TestAppendLookupIsBoundedByTheBatch(t *testing.T) {
	s, err := Open(t.Context(), storetest.NewPostgresDatabase(t), Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	owner := storetest.Owner("big")
	g := storetest.FullGroup("g")
	if _, err := s.PutGroup(ctx, owner, g); err != nil {
		t.Fatal(err)
	}
	// A fleet beside the big owner: under a generic plan the planner
	// expects an owner to be as small as the average one.
	storetest.FillDisappearing(t, s, 2000, 5, time.Now().Add(24*time.Hour), 0)
	batch := make([][]byte, 10)
	for i := range batch {
		batch[i] = []byte(fmt.Sprintf("probe-%d", i))
	}
	buffers := map[int]int{}
	stored := 0
	for _, size := range []int{1000, 30000} {
		for stored < size {
			msgs := storetest.Messages(fmt.Sprintf("m%d-", stored), g.GetId(), 1000, int64(stored))
			if _, err := s.AppendMessages(ctx, owner, msgs, store.AppendOptions{MostlyNew: true}); err != nil {
				t.Fatal(err)
			}
			stored += len(msgs)
		}
		batch[0] = storetest.Messages(fmt.Sprintf("m%d-", stored-1000), g.GetId(), 1, 0)[0].GetId() // one stored
		if _, err := s.pool.Exec(ctx, "ANALYZE messages"); err != nil {
			t.Fatal(err)
		}
		n, filtered := lookupWork(t, s, storedIDs, owner, batch)
		buffers[size] = n
		if filtered != 0 {
			t.Errorf("owner of %d messages: the lookup read and filtered out %d rows; want a probe per id", size, filtered)
		}
		oldN, oldFiltered := lookupWork(t, s, oldStoredIDs, owner, batch)
		t.Logf("owner of %d messages: %d buffers, 0 rows filtered; the form it replaced: %d buffers, %d rows filtered", size, n, oldN, oldFiltered)
	}
	// A probe reads the primary key's height (a level more at 30,000) and
	// a heap page: a few buffers an id, never the owner's messages.
	if buffers[30000] > 2*buffers[1000] || buffers[30000] > 5*len(batch) {
		t.Errorf("the lookup reads with the owner: %v buffers by owner size, for %d ids", buffers, len(batch))
	}
	exist, err := s.MessagesExist(ctx, owner, batch)
	if err != nil || !exist[0] || exist[1] {
		t.Errorf("MessagesExist of one stored id and nine not: %v, %v", exist, err)
	}
}

// oldStoredIDs is the form storedIDs replaced: the test shows why.
const oldStoredIDs = `SELECT id FROM messages WHERE owner = $1 AND id = ANY($2)`

// lookupWork runs query (owner $1, ids $2) as a prepared statement under
// a forced generic plan and returns the buffers it read and the rows its
// nodes read and filtered out.
func lookupWork(t *testing.T, s *Store, query, owner string, ids [][]byte) (buffers, filtered int) {
	t.Helper()
	ctx := t.Context()
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	for _, stmt := range []string{"SET plan_cache_mode = force_generic_plan", "PREPARE lookup(text, bytea[]) AS " + query} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		_, _ = c.Exec(ctx, "DEALLOCATE lookup")
		_, _ = c.Exec(ctx, "RESET plan_cache_mode")
	}()
	// EXECUTE takes no bind parameters under EXPLAIN: literals.
	lits := make([]string, len(ids))
	for i, id := range ids {
		lits[i] = fmt.Sprintf("decode('%x', 'hex')", id)
	}
	var plan string
	explain := fmt.Sprintf("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE lookup('%s', ARRAY[%s])", owner, strings.Join(lits, ", "))
	if err := c.QueryRow(ctx, explain).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var parsed []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &parsed); err != nil {
		t.Fatal(err)
	}
	root := parsed[0].Plan
	return root.SharedHit + root.SharedRead, root.filtered()
}

// planNode is what the test reads of an EXPLAIN (FORMAT JSON) node.
type planNode struct {
	SharedHit  int        `json:"Shared Hit Blocks"`
	SharedRead int        `json:"Shared Read Blocks"`
	Removed    int        `json:"Rows Removed by Filter"`
	Loops      int        `json:"Actual Loops"`
	Plans      []planNode `json:"Plans"`
}

// filtered is the rows the plan's nodes read and threw away.
func (n planNode) filtered() int {
	total := n.Removed * max(n.Loops, 1)
	for _, c := range n.Plans {
		total += c.filtered()
	}
	return total
}
