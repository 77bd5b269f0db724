package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

func (s ownersSQL) SetHold(ctx context.Context, h store.Hold) error {
	_, err := s.exec(ctx, s.d.bind(`INSERT INTO holds (owner, hold_id, backup_id, reason, principal, created_ns, until_ns) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (owner, hold_id) DO UPDATE SET reason = excluded.reason, principal = excluded.principal, until_ns = excluded.until_ns`),
		h.Owner, h.ID, h.Backup, h.Reason, h.Principal, h.Created.UnixNano(), unixOrZero(h.Until))
	if err != nil {
		return fmt.Errorf("%s: set hold: %w", s.d.Name, err)
	}
	return nil
}

func (s ownersSQL) ReleaseHold(ctx context.Context, owner, id string) error {
	n, err := s.exec(ctx, s.d.bind(`DELETE FROM holds WHERE owner = ? AND hold_id = ?`), owner, id)
	if err != nil {
		return fmt.Errorf("%s: release hold: %w", s.d.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("hold: %w", store.ErrNotFound)
	}
	return nil
}

func (s ownersSQL) ListHolds(ctx context.Context, owner string) ([]store.Hold, error) {
	var out []store.Hold
	// Bounded by the holds an owner may have (jobs.MaxHoldsPerOwner).
	err := s.db.Read().Query(ctx, s.d.bind(`SELECT owner, hold_id, backup_id, reason, principal, created_ns, until_ns FROM holds WHERE owner = ? ORDER BY owner, backup_id, created_ns, hold_id`),
		[]any{owner}, func(rows Rows) error {
			for rows.Next() {
				var h store.Hold
				var created, until int64
				if err := rows.Scan(&h.Owner, &h.ID, &h.Backup, &h.Reason, &h.Principal, &created, &until); err != nil {
					return err
				}
				h.Created = time.Unix(0, created)
				if until != 0 {
					h.Until = time.Unix(0, until)
				}
				out = append(out, h)
			}
			return rows.Err()
		})
	if err != nil {
		return nil, fmt.Errorf("%s: list holds: %w", s.d.Name, err)
	}
	return out, nil
}

// notHeld refuses, inside a delete's transaction, a backup a hold in
// force keeps: one on the backup, or one on its owner.
func (s sqlBase) notHeld(ctx context.Context, tx Conn, owner, id string) error {
	var reason string
	err := tx.QueryRow(ctx, s.d.bind(`SELECT reason FROM holds WHERE owner = ? AND (backup_id = '' OR backup_id = ?) AND (until_ns = 0 OR until_ns > ?) ORDER BY backup_id LIMIT 1`),
		owner, id, time.Now().UnixNano()).Scan(&reason)
	switch {
	case err == nil:
		return fmt.Errorf("backup %.64q: %w", id, store.ErrHeld)
	case !errors.Is(err, s.d.NoRows):
		return fmt.Errorf("%s: read holds: %w", s.d.Name, err)
	}
	return nil
}

// conversationTables are the owner tables an erasure empties in one
// transaction, in OwnerRowTables' order: a message names its group.
var conversationTables = []string{"messages", "tombstones", "groups"}

func (s ownersSQL) EraseOwnerRows(ctx context.Context, owner, keep string) (map[string]int64, error) {
	out := map[string]int64{}
	// An owner's conversations go in one transaction that first locks
	// its groups: an append takes its groups FOR SHARE, so one running
	// commits first and one arriving waits and then finds its group
	// gone. Deleted a table a transaction, a message appended between
	// the messages' delete and the groups' broke the foreign key, and
	// the erasure failed INTERNAL while the owner's devices wrote
	// (issue 46, finding 10).
	err := s.db.Write(ctx, func(tx Conn) error {
		err := tx.Query(ctx, s.d.bind(`SELECT id FROM groups WHERE owner = ?`)+s.d.ForUpdate, []any{owner}, func(Rows) error { return nil })
		if err != nil {
			return fmt.Errorf("lock the owner's groups: %w", err)
		}
		for _, table := range conversationTables {
			n, err := tx.Exec(ctx, s.d.bind(`DELETE FROM `+table+` WHERE owner = ?`), owner)
			if err != nil {
				return fmt.Errorf("erase the owner's %s: %w", table, err)
			}
			out[table] = n
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("%s: %w", s.d.Name, err)
	}
	for _, table := range store.OwnerRowTables {
		if slices.Contains(conversationTables, table) {
			continue
		}
		query, args := `DELETE FROM `+table+` WHERE owner = ?`, []any{owner}
		if table == "jobs" {
			// Every erasure's record stays, this one's and those of
			// earlier erasures of the name, failed ones included: a
			// re-erasure (a schedule re-created the owner) must not
			// delete the first one's audit record (issue 46, finding 6).
			query, args = query+` AND id <> ? AND kind <> ?`, append(args, keep, store.JobErase)
		}
		// One statement a table, each its own transaction: an erasure
		// that stops part-way is run again, and finds less.
		n, err := s.exec(ctx, s.d.bind(query), args...)
		if err != nil {
			return out, fmt.Errorf("%s: erase the owner's %s: %w", s.d.Name, table, err)
		}
		out[table] = n
	}
	return out, nil
}

func (s ownersSQL) CountOwnerRows(ctx context.Context, owner string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, table := range store.OwnerRowTables {
		var n int64
		if err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT count(*) FROM `+table+` WHERE owner = ?`), owner).Scan(&n); err != nil {
			return nil, fmt.Errorf("%s: count the owner's %s: %w", s.d.Name, table, err)
		}
		out[table] = n
	}
	return out, nil
}

func (s ownersSQL) MarkOwnerErased(ctx context.Context, owner, job string, at time.Time) error {
	_, err := s.exec(ctx, s.d.bind(`INSERT INTO erased_owners (owner, erase_job, erased_ns) VALUES (?, ?, ?)
		ON CONFLICT (owner) DO UPDATE SET erase_job = excluded.erase_job, erased_ns = excluded.erased_ns, reenabled_ns = 0, reenabled_by = '', reason = ''
		WHERE erased_owners.erase_job <> excluded.erase_job`), owner, job, at.UnixNano())
	if err != nil {
		return fmt.Errorf("%s: record the owner erased: %w", s.d.Name, err)
	}
	return nil
}

func (s ownersSQL) OwnerErased(ctx context.Context, owner string) (store.ErasedOwner, error) {
	return s.ownerErased(ctx, s.db.Read(), owner)
}

func (s ownersSQL) ownerErased(ctx context.Context, c Conn, owner string) (store.ErasedOwner, error) {
	e := store.ErasedOwner{Owner: owner}
	var erased, reenabled int64
	err := c.QueryRow(ctx, s.d.bind(`SELECT erase_job, erased_ns, reenabled_ns, reenabled_by, reason FROM erased_owners WHERE owner = ?`), owner).
		Scan(&e.Job, &erased, &reenabled, &e.ReenabledBy, &e.Reason)
	if errors.Is(err, s.d.NoRows) {
		return store.ErasedOwner{}, fmt.Errorf("owner %s was never erased: %w", owner, store.ErrNotFound)
	}
	if err != nil {
		return store.ErasedOwner{}, fmt.Errorf("%s: read the owner's erasure record: %w", s.d.Name, err)
	}
	e.Erased = time.Unix(0, erased)
	if reenabled != 0 {
		e.Reenabled = time.Unix(0, reenabled)
	}
	return e, nil
}

func (s ownersSQL) ReenableOwner(ctx context.Context, owner, principal, reason string, at time.Time) (store.ErasedOwner, error) {
	var out store.ErasedOwner
	err := s.db.Write(ctx, func(tx Conn) error {
		if _, err := tx.Exec(ctx, s.d.bind(`UPDATE erased_owners SET reenabled_ns = ?, reenabled_by = ?, reason = ? WHERE owner = ? AND reenabled_ns = 0`),
			at.UnixNano(), principal, reason, owner); err != nil {
			return fmt.Errorf("%s: re-enable the owner: %w", s.d.Name, err)
		}
		var err error
		out, err = s.ownerErased(ctx, tx, owner)
		return err
	})
	return out, err
}
