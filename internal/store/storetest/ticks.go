package storetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

// testScheduleTicks: of many replicas claiming one (owner, schedule,
// tick) at once, exactly one wins; another tick, owner or schedule is a
// claim of its own; a winning claim names the previous tick claimed; and
// claims a day older than the newest are gone.
func testScheduleTicks(t *testing.T, s store.Store) {
	ctx := t.Context()
	base := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			won, _, err := s.ClaimScheduleTick(ctx, "o", "nightly", base, "replica-"+string(rune('a'+i)))
			if err != nil {
				t.Error(err)
			}
			if won {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of 8 concurrent claims of one tick won; want exactly 1", n)
	}
	for _, c := range []struct {
		owner, schedule string
		tick            time.Time
	}{
		{"o", "nightly", base.Add(time.Minute)},
		{"other", "nightly", base},
		{"o", "hourly", base},
	} {
		if won, _, err := s.ClaimScheduleTick(ctx, c.owner, c.schedule, c.tick, "a"); err != nil || !won {
			t.Errorf("claim %+v: won %v, %v; want a claim of its own", c, won, err)
		}
	}
	// The previous tick claimed, for counting the ticks missed between.
	later := base.Add(10 * time.Minute)
	won, prev, err := s.ClaimScheduleTick(ctx, "o", "nightly", later, "a")
	if err != nil || !won || !prev.Equal(base.Add(time.Minute)) {
		t.Errorf("claim of a later tick: won %v, previous %v, %v; want previous %v", won, prev, err, base.Add(time.Minute))
	}
	if won, _, _ := s.ClaimScheduleTick(ctx, "o", "nightly", later, "b"); won {
		t.Error("a tick claimed twice")
	}
	// A day later, the old claims are gone: the previous tick is the
	// last one kept.
	dayLater := later.Add(25 * time.Hour)
	if _, _, err := s.ClaimScheduleTick(ctx, "o", "nightly", dayLater, "a"); err != nil {
		t.Fatal(err)
	}
	if won, _, _ := s.ClaimScheduleTick(ctx, "o", "nightly", base, "a"); !won {
		t.Error("a claim older than a day was kept")
	}
}
