package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

const ownerKeyColumns = `owner, key_id, wrapped_key, kek_fingerprint, created_ns, rewrapped_ns`

func scanOwnerKey(scan func(...any) error) (store.OwnerKey, error) {
	var k store.OwnerKey
	var created, rewrapped int64
	if err := scan(&k.Owner, &k.KeyID, &k.Wrapped, &k.KEKFingerprint, &created, &rewrapped); err != nil {
		return store.OwnerKey{}, err
	}
	k.Created = time.Unix(0, created)
	if rewrapped != 0 {
		k.Rewrapped = time.Unix(0, rewrapped)
	}
	return k, nil
}

func (s SQLStore) GetOwnerKey(ctx context.Context, owner string) (store.OwnerKey, error) {
	return s.getOwnerKey(ctx, s.db.Read(), owner)
}

func (s SQLStore) getOwnerKey(ctx context.Context, c Conn, owner string) (store.OwnerKey, error) {
	k, err := scanOwnerKey(c.QueryRow(ctx, s.d.bind(`SELECT `+ownerKeyColumns+` FROM owner_keys WHERE owner = ?`), owner).Scan)
	if errors.Is(err, s.d.NoRows) {
		return store.OwnerKey{}, fmt.Errorf("owner key: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.OwnerKey{}, fmt.Errorf("%s: read owner key: %w", s.d.Name, err)
	}
	return k, nil
}

func (s SQLStore) CreateOwnerKey(ctx context.Context, k store.OwnerKey) (store.OwnerKey, error) {
	var stored store.OwnerKey
	err := s.db.Write(ctx, func(tx Conn) error {
		if err := s.kekUsable(ctx, tx, k.KEKFingerprint); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.d.bind(`INSERT INTO owner_keys (`+ownerKeyColumns+`) VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT (owner) DO NOTHING`),
			k.Owner, k.KeyID, k.Wrapped, k.KEKFingerprint, k.Created.UnixNano())
		if err != nil {
			return fmt.Errorf("%s: create owner key: %w", s.d.Name, err)
		}
		stored, err = s.getOwnerKey(ctx, tx, k.Owner)
		return err
	})
	return stored, err
}

func (s SQLStore) OwnerKeysNotUnder(ctx context.Context, kek, afterOwner string, limit int) ([]store.OwnerKey, error) {
	var out []store.OwnerKey
	err := s.db.Read().Query(ctx, s.d.bind(`SELECT `+ownerKeyColumns+` FROM owner_keys WHERE kek_fingerprint <> ? AND owner > ? ORDER BY owner LIMIT ?`),
		[]any{kek, afterOwner, limit}, func(rows Rows) error {
			for rows.Next() {
				k, err := scanOwnerKey(rows.Scan)
				if err != nil {
					return err
				}
				out = append(out, k)
			}
			return rows.Err()
		})
	if err != nil {
		return nil, fmt.Errorf("%s: list owner keys to rewrap: %w", s.d.Name, err)
	}
	return out, nil
}

func (s SQLStore) RewrapOwnerKey(ctx context.Context, old store.OwnerKey, wrapped []byte, kek string, at time.Time) error {
	var n int64
	err := s.db.Write(ctx, func(tx Conn) error {
		if err := s.kekUsable(ctx, tx, kek); err != nil {
			return err
		}
		var err error
		n, err = tx.Exec(ctx, s.d.bind(`UPDATE owner_keys SET wrapped_key = ?, kek_fingerprint = ?, rewrapped_ns = ? WHERE owner = ? AND key_id = ? AND kek_fingerprint = ? AND wrapped_key = ?`),
			wrapped, kek, at.UnixNano(), old.Owner, old.KeyID, old.KEKFingerprint, old.Wrapped)
		if err != nil {
			return fmt.Errorf("%s: rewrap owner key: %w", s.d.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("owner key %s: changed since it was read: %w", old.KeyID, store.ErrNotFound)
	}
	return nil
}

func (s SQLStore) LegacyBackups(ctx context.Context, afterOwner, afterID string, limit int) ([]store.Backup, error) {
	var out []store.Backup
	err := s.db.Read().Query(ctx, s.d.bind(`SELECT `+backupColumns+` FROM backups WHERE owner_key_id = '' AND wrapped_key <> ? AND (owner > ? OR (owner = ? AND id > ?)) ORDER BY owner, id LIMIT ?`),
		[]any{[]byte{}, afterOwner, afterOwner, afterID, limit}, func(rows Rows) error {
			for rows.Next() {
				var r backupRow
				if err := rows.Scan(r.dest()...); err != nil {
					return err
				}
				out = append(out, r.backup())
			}
			return rows.Err()
		})
	if err != nil {
		return nil, fmt.Errorf("%s: list backups under the KEK: %w", s.d.Name, err)
	}
	return out, nil
}

func (s SQLStore) RewrapBackupKey(ctx context.Context, owner, id string, oldWrapped, wrapped []byte, ownerKeyID string) error {
	n, err := s.exec(ctx, s.d.bind(`UPDATE backups SET wrapped_key = ?, owner_key_id = ?, kek_fingerprint = '' WHERE owner = ? AND id = ? AND owner_key_id = '' AND wrapped_key = ?`),
		wrapped, ownerKeyID, owner, id, oldWrapped)
	if err != nil {
		return fmt.Errorf("%s: rewrap backup key: %w", s.d.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("backup %s: changed since it was read: %w", id, store.ErrNotFound)
	}
	return nil
}

func (s SQLStore) KeyCounts(ctx context.Context) (store.KeyCounts, error) {
	out := store.KeyCounts{OwnerKeys: map[string]int64{}, LegacyBackups: map[string]int64{}}
	count := func(query string, into map[string]int64) error {
		return s.db.Read().Query(ctx, s.d.bind(query), []any{[]byte{}}, func(rows Rows) error {
			for rows.Next() {
				var fp string
				var n int64
				if err := rows.Scan(&fp, &n); err != nil {
					return err
				}
				into[fp] = n
			}
			return rows.Err()
		})
	}
	if err := count(`SELECT kek_fingerprint, count(*) FROM owner_keys WHERE wrapped_key <> ? GROUP BY kek_fingerprint`, out.OwnerKeys); err != nil {
		return store.KeyCounts{}, fmt.Errorf("%s: count owner keys: %w", s.d.Name, err)
	}
	if err := count(`SELECT kek_fingerprint, count(*) FROM backups WHERE owner_key_id = '' AND wrapped_key <> ? GROUP BY kek_fingerprint`, out.LegacyBackups); err != nil {
		return store.KeyCounts{}, fmt.Errorf("%s: count backups under a KEK: %w", s.d.Name, err)
	}
	return out, nil
}

func (s SQLStore) SetHold(ctx context.Context, h store.Hold) error {
	_, err := s.exec(ctx, s.d.bind(`INSERT INTO holds (owner, hold_id, backup_id, reason, principal, created_ns, until_ns) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (owner, hold_id) DO UPDATE SET reason = excluded.reason, principal = excluded.principal, until_ns = excluded.until_ns`),
		h.Owner, h.ID, h.Backup, h.Reason, h.Principal, h.Created.UnixNano(), unixOrZero(h.Until))
	if err != nil {
		return fmt.Errorf("%s: set hold: %w", s.d.Name, err)
	}
	return nil
}

func (s SQLStore) ReleaseHold(ctx context.Context, owner, id string) error {
	n, err := s.exec(ctx, s.d.bind(`DELETE FROM holds WHERE owner = ? AND hold_id = ?`), owner, id)
	if err != nil {
		return fmt.Errorf("%s: release hold: %w", s.d.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("hold: %w", store.ErrNotFound)
	}
	return nil
}

func (s SQLStore) ListHolds(ctx context.Context, owner string) ([]store.Hold, error) {
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
func (s SQLStore) notHeld(ctx context.Context, tx Conn, owner, id string) error {
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

func (s SQLStore) DestroyOwnerKey(ctx context.Context, owner string) error {
	return s.db.Write(ctx, func(tx Conn) error {
		if _, err := tx.Exec(ctx, s.d.bind(`DELETE FROM owner_keys WHERE owner = ?`), owner); err != nil {
			return fmt.Errorf("%s: destroy owner key: %w", s.d.Name, err)
		}
		// Rows older than owner keys hold data keys the KEK opens: blank
		// them in the same transaction.
		if _, err := tx.Exec(ctx, s.d.bind(`UPDATE backups SET wrapped_key = ? WHERE owner = ?`), []byte{}, owner); err != nil {
			return fmt.Errorf("%s: blank the owner's wrapped keys: %w", s.d.Name, err)
		}
		return nil
	})
}

// conversationTables are the owner tables an erasure empties in one
// transaction, in OwnerRowTables' order: a message names its group.
var conversationTables = []string{"messages", "tombstones", "groups"}

func (s SQLStore) EraseOwnerRows(ctx context.Context, owner, keep string) (map[string]int64, error) {
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

func (s SQLStore) CountOwnerRows(ctx context.Context, owner string) (map[string]int64, error) {
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

// kekUsable refuses, in the transaction that wraps a row under the KEK
// fingerprint, a KEK that is retired. The fingerprint's lock orders it
// against RetireKEK: a row wrapped under the KEK either commits before the
// retirement (and the rewrap that follows it sees the row) or waits and is
// refused, so a KEK whose rows are all rewrapped gets no new one and can
// be destroyed (issue 46, finding 1).
func (s SQLStore) kekUsable(ctx context.Context, tx Conn, fingerprint string) error {
	if s.d.LockKey != "" {
		if _, err := tx.Exec(ctx, s.d.LockKey, "kek retirement: "+fingerprint); err != nil {
			return fmt.Errorf("%s: lock the key-encryption key's retirement: %w", s.d.Name, err)
		}
	}
	var retired int64
	err := tx.QueryRow(ctx, s.d.bind(`SELECT COALESCE(max(retired_ns), 0) FROM kek_retirements WHERE fingerprint = ?`), fingerprint).Scan(&retired)
	if err != nil {
		return fmt.Errorf("%s: is the key-encryption key retired: %w", s.d.Name, err)
	}
	if retired != 0 {
		return fmt.Errorf("key-encryption key %s: %w", fingerprint, store.ErrKEKRetired)
	}
	return nil
}

func (s SQLStore) NoteErasure(ctx context.Context, fingerprint, job string, at time.Time) error {
	_, err := s.exec(ctx, s.d.bind(`INSERT INTO kek_retirements (fingerprint, job_id, due_ns, retired_ns, destroyed_ns)
		SELECT ?, ?, ?, COALESCE(max(retired_ns), 0), COALESCE(max(destroyed_ns), 0) FROM kek_retirements WHERE fingerprint = ?
		ON CONFLICT (fingerprint, job_id) DO NOTHING`), fingerprint, job, at.UnixNano(), fingerprint)
	if err != nil {
		return fmt.Errorf("%s: note the erasure's key-encryption key: %w", s.d.Name, err)
	}
	return nil
}

func (s SQLStore) RetireKEK(ctx context.Context, fingerprint string, at time.Time) error {
	return s.db.Write(ctx, func(tx Conn) error {
		if s.d.LockKey != "" {
			if _, err := tx.Exec(ctx, s.d.LockKey, "kek retirement: "+fingerprint); err != nil {
				return fmt.Errorf("%s: lock the key-encryption key's retirement: %w", s.d.Name, err)
			}
		}
		// A retirement no erasure asked for has a row of its own (job "").
		if _, err := tx.Exec(ctx, s.d.bind(`INSERT INTO kek_retirements (fingerprint, job_id, due_ns, retired_ns) VALUES (?, '', 0, ?)
			ON CONFLICT (fingerprint, job_id) DO NOTHING`), fingerprint, at.UnixNano()); err != nil {
			return fmt.Errorf("%s: retire key-encryption key: %w", s.d.Name, err)
		}
		if _, err := tx.Exec(ctx, s.d.bind(`UPDATE kek_retirements SET retired_ns = ? WHERE fingerprint = ? AND retired_ns = 0`), at.UnixNano(), fingerprint); err != nil {
			return fmt.Errorf("%s: retire key-encryption key: %w", s.d.Name, err)
		}
		return nil
	})
}

func (s SQLStore) KEKDestroyed(ctx context.Context, fingerprint string, at time.Time) error {
	if _, err := s.exec(ctx, s.d.bind(`UPDATE kek_retirements SET destroyed_ns = ? WHERE fingerprint = ? AND destroyed_ns = 0 AND retired_ns <> 0`),
		at.UnixNano(), fingerprint); err != nil {
		return fmt.Errorf("%s: record the key-encryption key destroyed: %w", s.d.Name, err)
	}
	return nil
}

func (s SQLStore) ListKEKRetirements(ctx context.Context) ([]store.KEKRetirement, error) {
	return s.kekRetirements(ctx, `SELECT fingerprint, job_id, due_ns, retired_ns, destroyed_ns FROM kek_retirements ORDER BY fingerprint, job_id`)
}

func (s SQLStore) ErasureKEKs(ctx context.Context, job string) ([]store.KEKRetirement, error) {
	return s.kekRetirements(ctx, `SELECT fingerprint, job_id, due_ns, retired_ns, destroyed_ns FROM kek_retirements WHERE job_id = ? ORDER BY fingerprint`, job)
}

// kekRetirements reads retirement rows, one KEKRetirement per
// fingerprint (rows arrive in fingerprint order).
func (s SQLStore) kekRetirements(ctx context.Context, query string, args ...any) ([]store.KEKRetirement, error) {
	var out []store.KEKRetirement
	at := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	err := s.db.Read().Query(ctx, s.d.bind(query), args, func(rows Rows) error {
		for rows.Next() {
			var fp, job string
			var due, retired, destroyed int64
			if err := rows.Scan(&fp, &job, &due, &retired, &destroyed); err != nil {
				return err
			}
			if len(out) == 0 || out[len(out)-1].Fingerprint != fp {
				out = append(out, store.KEKRetirement{Fingerprint: fp})
			}
			r := &out[len(out)-1]
			if job != "" {
				r.Jobs = append(r.Jobs, job)
				if r.Due.IsZero() || at(due).Before(r.Due) {
					r.Due = at(due)
				}
			}
			if retired != 0 && (r.Retired.IsZero() || at(retired).Before(r.Retired)) {
				r.Retired = at(retired)
			}
			if destroyed != 0 && (r.Destroyed.IsZero() || at(destroyed).Before(r.Destroyed)) {
				r.Destroyed = at(destroyed)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: list key-encryption key retirements: %w", s.d.Name, err)
	}
	return out, nil
}

func (s SQLStore) MarkOwnerErased(ctx context.Context, owner, job string, at time.Time) error {
	_, err := s.exec(ctx, s.d.bind(`INSERT INTO erased_owners (owner, erase_job, erased_ns) VALUES (?, ?, ?)
		ON CONFLICT (owner) DO UPDATE SET erase_job = excluded.erase_job, erased_ns = excluded.erased_ns, reenabled_ns = 0, reenabled_by = '', reason = ''
		WHERE erased_owners.erase_job <> excluded.erase_job`), owner, job, at.UnixNano())
	if err != nil {
		return fmt.Errorf("%s: record the owner erased: %w", s.d.Name, err)
	}
	return nil
}

func (s SQLStore) OwnerErased(ctx context.Context, owner string) (store.ErasedOwner, error) {
	return s.ownerErased(ctx, s.db.Read(), owner)
}

func (s SQLStore) ownerErased(ctx context.Context, c Conn, owner string) (store.ErasedOwner, error) {
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

func (s SQLStore) ReenableOwner(ctx context.Context, owner, principal, reason string, at time.Time) (store.ErasedOwner, error) {
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
