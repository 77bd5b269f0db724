package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// tickRetention is how long a claimed tick is kept: long enough to tell a
// replica firing late a tick already run, and to count missed ticks.
const tickRetention = 24 * time.Hour

func (s jobsSQL) ClaimScheduleTick(ctx context.Context, owner, schedule string, tick time.Time, by string) (won bool, previous time.Time, err error) {
	err = s.db.Write(ctx, func(tx Conn) error {
		n, err := tx.Exec(ctx, s.d.bind(`INSERT INTO schedule_ticks (owner, schedule, tick_ns, claimed_by, claimed_ns) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`),
			owner, schedule, tick.UnixNano(), by, time.Now().UnixNano())
		if err != nil || n == 0 {
			return err
		}
		won = true
		var prev int64
		err = tx.QueryRow(ctx, s.d.bind(`SELECT tick_ns FROM schedule_ticks WHERE owner = ? AND schedule = ? AND tick_ns < ? ORDER BY tick_ns DESC LIMIT 1`),
			owner, schedule, tick.UnixNano()).Scan(&prev)
		switch {
		case errors.Is(err, s.d.NoRows):
		case err != nil:
			return err
		default:
			previous = time.Unix(0, prev).UTC()
		}
		_, err = tx.Exec(ctx, s.d.bind(`DELETE FROM schedule_ticks WHERE owner = ? AND schedule = ? AND tick_ns < ?`),
			owner, schedule, tick.Add(-tickRetention).UnixNano())
		return err
	})
	if err != nil {
		return false, time.Time{}, fmt.Errorf("%s: claim schedule tick: %w", s.d.Name, err)
	}
	return won, previous, nil
}
