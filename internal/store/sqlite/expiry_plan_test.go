package sqlite_test

import (
	"strings"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestIdleExpiryIsFlat (issue 52): the expiry worker's questions with no
// message due (anything due? the oldest due deadline) search
// messages_due, the index led by the deadline, rather than scan every
// disappearing message of the fleet as messages_expiry (led by the
// owner) made them.
func TestIdleExpiryIsFlat(t *testing.T) {
	s := open(t).(*sqlite.Store)
	storetest.FillDisappearing(t, s, 200, 5, time.Now().Add(24*time.Hour), 0)
	if _, err := s.DB().ExecContext(t.Context(), "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"SELECT 1 FROM messages WHERE expires_at_ns <= ? LIMIT 1",
		"SELECT min(expires_at_ns) FROM messages WHERE expires_at_ns <= ?",
	} {
		plan := queryPlan(t, s, q, time.Now().UnixNano())
		got := strings.Join(plan, "; ")
		if !strings.Contains(got, "SEARCH messages USING") || !strings.Contains(got, "messages_due") {
			t.Errorf("%s: %s; want a search of messages_due", q, got)
		}
	}
}
