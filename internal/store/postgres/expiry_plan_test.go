package postgres_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestIdleExpiryIsFlat (issue 52): with no message due, the expiry
// worker's questions (anything due? the oldest due deadline) read a few
// buffers of messages_due whatever the fleet holds: the same at 1,000 and
// at 4,000 owners with disappearing messages. Before, messages_expiry led
// with the owner and each run read every disappearing message.
func TestIdleExpiryIsFlat(t *testing.T) {
	s := open(t).(*postgres.Store)
	pool := s.Pool()
	deadline := time.Now().Add(24 * time.Hour)
	buffers := map[int]map[string]int{}
	filled := 0
	for _, owners := range []int{1000, 4000} {
		storetest.FillDisappearing(t, s, owners-filled, 5, deadline.Add(time.Duration(filled)*time.Hour), filled)
		filled = owners
		if _, err := pool.Exec(t.Context(), "ANALYZE messages"); err != nil {
			t.Fatal(err)
		}
		buffers[owners] = map[string]int{}
		for _, q := range []string{
			"SELECT 1 FROM messages WHERE expires_at_ns <= $1 LIMIT 1",
			"SELECT min(expires_at_ns) FROM messages WHERE expires_at_ns <= $1",
		} {
			var plan string
			if err := pool.QueryRow(t.Context(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q, time.Now().UnixNano()).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			var parsed []struct {
				Plan map[string]any `json:"Plan"`
			}
			if err := json.Unmarshal([]byte(plan), &parsed); err != nil {
				t.Fatal(err)
			}
			p := parsed[0].Plan
			n := int(p["Shared Hit Blocks"].(float64) + p["Shared Read Blocks"].(float64))
			buffers[owners][q] = n
			if !strings.Contains(plan, "messages_due") {
				t.Errorf("%d owners: %s does not read messages_due:\n%s", owners, q, plan)
			}
			if n > 8 {
				t.Errorf("%d owners, nothing due: %s read %d buffers, want a few", owners, q, n)
			}
		}
	}
	t.Logf("buffers read with nothing due, by owners with disappearing messages: %v", fmt.Sprint(buffers))
}
