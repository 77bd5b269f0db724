package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// lookupBatch bounds the ids of one existence query (SQLite takes 32,766
// parameters at most).
const lookupBatch = 1000

func (s groupsSQL) MessagesExist(ctx context.Context, owner string, ids [][]byte) ([]bool, error) {
	out := make([]bool, len(ids))
	for start := 0; start < len(ids); start += lookupBatch {
		batch := ids[start:min(start+lookupBatch, len(ids))]
		args := make([]any, 0, len(batch)+1)
		args = append(args, owner)
		for _, id := range batch {
			args = append(args, id)
		}
		query := s.d.bind(`SELECT id FROM messages WHERE owner = ? AND id IN (?` + strings.Repeat(", ?", len(batch)-1) + `)`)
		found := map[string]bool{}
		err := s.db.Read().Query(ctx, query, args, func(rows Rows) error {
			for rows.Next() {
				var id []byte
				if err := rows.Scan(&id); err != nil {
					return err
				}
				found[string(id)] = true
			}
			return rows.Err()
		})
		if err != nil {
			return nil, fmt.Errorf("%s: messages exist: %w", s.d.Name, err)
		}
		for i, id := range batch {
			out[start+i] = found[string(id)]
		}
	}
	return out, nil
}

func (s groupsSQL) GetConsent(ctx context.Context, owner string, key store.ConsentKey) (*cs.ConsentSave, error) {
	var typ, state int32
	r := &cs.ConsentSave{}
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT entity_type, state, entity, consented_at_ns FROM consent WHERE owner = ? AND entity_type = ? AND entity = ?`),
		owner, int32(key.EntityType), key.Entity).Scan(&typ, &state, &r.Entity, &r.ConsentedAtNs)
	if errors.Is(err, s.d.NoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("%s: get consent: %w", s.d.Name, err)
	}
	r.EntityType, r.State = cs.ConsentTypeSave(typ), cs.ConsentStateSave(state)
	return r, nil
}
