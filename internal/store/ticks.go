package store

import (
	"context"
	"time"
)

// ScheduleTicks is where the replicas of a fleet agree which of them runs
// a schedule's tick for an owner: the first claim of (owner, schedule,
// tick) wins, in the store every replica shares.
type ScheduleTicks interface {
	// ClaimScheduleTick records that by runs schedule's tick for owner,
	// unless some replica claimed it already. It reports whether this
	// claim won and, when it did, the previous tick claimed for the owner
	// and schedule (zero when none), so that ticks missed in between are
	// known. Claims older than a day before tick are deleted.
	ClaimScheduleTick(ctx context.Context, owner, schedule string, tick time.Time, by string) (won bool, previous time.Time, err error)
}
