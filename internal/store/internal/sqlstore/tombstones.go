package sqlstore

import (
	"context"
	"errors"
	"fmt"

	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// A tombstone key written twice under one change (the same message id
// deleted, stored again and deleted once more is two changes) is one row.
const tombstoneInsert = `INSERT INTO tombstones (owner, group_id, sent_at_ns, id, change_seq) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (owner, group_id, sent_at_ns, id, change_seq) DO NOTHING`

// bury records, in the removing transaction tx, that change seq removed
// the record at key of group groupID.
func (s sqlBase) bury(ctx context.Context, tx Conn, owner string, groupID []byte, key store.TombstoneKey, seq int64) error {
	if _, err := tx.Exec(ctx, s.d.bind(tombstoneInsert), owner, groupID, key.SentAtNs, nonNil(key.ID), seq); err != nil {
		return fmt.Errorf("%s: write tombstone of group %x: %w", s.d.Name, groupID, err)
	}
	return nil
}

// groupChanged keeps chains exact across a change of a group's
// exportability, in the writing transaction: a group that stops being
// exportable leaves a tombstone (the increments after it no longer hold
// it, so a restore must not take it from an older member), and one that
// becomes exportable restamps its messages with change seq, so the next
// increment holds every one of them (an increment reads what changed
// since its base, and these messages were written before it).
func (s sqlBase) groupChanged(ctx context.Context, tx Conn, owner string, old, now *gb.GroupSave, seq int64) error {
	was, is := old != nil && records.GroupExportable(old), records.GroupExportable(now)
	switch {
	case was && !is:
		return s.bury(ctx, tx, owner, now.GetId(), store.TombstoneKey{SentAtNs: store.GroupTombstoneSentAt}, seq)
	case !was && is && old != nil:
		if _, err := tx.Exec(ctx, s.d.bind(`UPDATE messages SET change_seq = ? WHERE owner = ? AND group_id = ?`), seq, owner, now.GetId()); err != nil {
			return fmt.Errorf("%s: restamp messages of group %x: %w", s.d.Name, now.GetId(), err)
		}
	}
	return nil
}

func (s changesSQL) HasTombstones(ctx context.Context, owner string, above, atMost int64) (bool, error) {
	var one int
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT 1 FROM tombstones WHERE owner = ? AND change_seq > ? AND change_seq <= ? LIMIT 1`), owner, above, atMost).Scan(&one)
	if errors.Is(err, s.d.NoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: read tombstones: %w", s.d.Name, err)
	}
	return true, nil
}

func (s changesSQL) GroupTombstones(ctx context.Context, owner string, groupID []byte, above, atMost int64, after *store.TombstoneKey, limit int) ([]store.Tombstone, error) {
	query := `SELECT sent_at_ns, id, max(change_seq) FROM tombstones WHERE owner = ? AND group_id = ? AND change_seq > ? AND change_seq <= ?`
	args := []any{owner, groupID, above, atMost}
	if after != nil {
		query += ` AND (sent_at_ns, id) > (?, ?)`
		args = append(args, after.SentAtNs, nonNil(after.ID))
	}
	query += ` GROUP BY sent_at_ns, id ORDER BY sent_at_ns, id LIMIT ?`
	args = append(args, limit)
	var out []store.Tombstone
	err := s.db.Read().Query(ctx, s.d.bind(query), args, func(rows Rows) error {
		for rows.Next() {
			var t store.Tombstone
			if err := rows.Scan(&t.Key.SentAtNs, &t.Key.ID, &t.ChangeSeq); err != nil {
				return err
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: read tombstones of group %x: %w", s.d.Name, groupID, err)
	}
	return out, nil
}

func (s changesSQL) PruneTombstones(ctx context.Context, owner string) (int64, error) {
	var floor *int64
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT min(change_seq) FROM backups WHERE owner = ? AND state = ? AND change_seq >= 0`), owner, store.BackupComplete).Scan(&floor)
	if err != nil {
		return 0, fmt.Errorf("%s: read the oldest backup's change: %w", s.d.Name, err)
	}
	if floor == nil {
		return 0, nil
	}
	n, err := s.exec(ctx, s.d.bind(`DELETE FROM tombstones WHERE owner = ? AND change_seq <= ?`), owner, *floor)
	if err != nil {
		return 0, fmt.Errorf("%s: prune tombstones: %w", s.d.Name, err)
	}
	return n, nil
}
