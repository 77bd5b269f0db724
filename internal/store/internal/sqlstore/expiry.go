package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PurgeExpired walks the owners holding expired messages in owner order
// (the messages_expiry index) and deletes a bounded batch of each, one
// transaction per owner, so that no owner's backlog holds a lock long or
// keeps another owner waiting.
func (s groupsSQL) PurgeExpired(ctx context.Context, now time.Time, afterOwner string, owners, perOwner int) (int64, string, error) {
	// Anything due at all? One entry of messages_due answers it, so an
	// idle fleet costs the same at any size (issue 52); only then are the
	// owners walked.
	var one int
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT 1 FROM messages WHERE expires_at_ns <= ? LIMIT 1`), now.UnixNano()).Scan(&one)
	if errors.Is(err, s.d.NoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("%s: any message due: %w", s.d.Name, err)
	}
	var due []string
	err = s.db.Read().Query(ctx, s.d.bind(`SELECT DISTINCT owner FROM messages WHERE owner > ? AND expires_at_ns <= ? ORDER BY owner LIMIT ?`),
		[]any{afterOwner, now.UnixNano(), owners}, func(rows Rows) error {
			for rows.Next() {
				var owner string
				if err := rows.Scan(&owner); err != nil {
					return err
				}
				due = append(due, owner)
			}
			return rows.Err()
		})
	if err != nil {
		return 0, "", fmt.Errorf("%s: owners with expired messages: %w", s.d.Name, err)
	}
	var deleted int64
	for _, owner := range due {
		err := s.db.Write(ctx, func(tx Conn) error {
			n, err := tx.Exec(ctx, s.d.bind(`DELETE FROM messages WHERE owner = ? AND id IN (SELECT id FROM messages WHERE owner = ? AND expires_at_ns <= ? LIMIT ?)`),
				owner, owner, now.UnixNano(), perOwner)
			deleted += n
			return err
		})
		if err != nil {
			return deleted, "", fmt.Errorf("%s: purge expired messages: %w", s.d.Name, err)
		}
	}
	if len(due) < owners {
		return deleted, "", nil
	}
	return deleted, due[len(due)-1], nil
}

func (s groupsSQL) OldestExpired(ctx context.Context, now time.Time) (time.Time, error) {
	var oldest *int64
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT min(expires_at_ns) FROM messages WHERE expires_at_ns <= ?`), now.UnixNano()).Scan(&oldest)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: oldest expired message: %w", s.d.Name, err)
	}
	if oldest == nil {
		return time.Time{}, nil
	}
	return time.Unix(0, *oldest), nil
}
