package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

func (s *Store) MergeConsent(ctx context.Context, owner string, records []*cs.ConsentSave) ([]store.Outcome, error) {
	out := make([]store.Outcome, len(records))
	err := inTx(ctx, s.pool, s.space, func(tx pgx.Tx) error {
		seq, err := nextChangeIn(ctx, tx, owner)
		if err != nil {
			return err
		}
		for i, r := range records {
			// One statement decides and writes: xmax = 0 tells an insert
			// from an update, and no row back means the stored record won.
			var inserted bool
			err := tx.QueryRow(ctx, `INSERT INTO consent AS c (owner, entity_type, entity, state, consented_at_ns, change_seq) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (owner, entity_type, entity) DO UPDATE SET state = excluded.state, consented_at_ns = excluded.consented_at_ns, change_seq = excluded.change_seq
				WHERE excluded.consented_at_ns > c.consented_at_ns
				RETURNING (xmax = 0)`,
				owner, int16(r.GetEntityType()), r.GetEntity(), int16(r.GetState()), r.GetConsentedAtNs(), seq).Scan(&inserted)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				out[i] = store.Unchanged
			case err != nil:
				return fmt.Errorf("postgres: write consent %s: %w", r.GetEntity(), err)
			case inserted:
				out[i] = store.Inserted
			default:
				out[i] = store.Updated
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
