package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

func (s keysSQL) GetOwnerKey(ctx context.Context, owner string) (store.OwnerKey, error) {
	return s.getOwnerKey(ctx, s.db.Read(), owner)
}

func (s keysSQL) getOwnerKey(ctx context.Context, c Conn, owner string) (store.OwnerKey, error) {
	k, err := scanOwnerKey(c.QueryRow(ctx, s.d.bind(`SELECT `+ownerKeyColumns+` FROM owner_keys WHERE owner = ?`), owner).Scan)
	if errors.Is(err, s.d.NoRows) {
		return store.OwnerKey{}, fmt.Errorf("owner key: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.OwnerKey{}, fmt.Errorf("%s: read owner key: %w", s.d.Name, err)
	}
	return k, nil
}

func (s keysSQL) CreateOwnerKey(ctx context.Context, k store.OwnerKey) (store.OwnerKey, error) {
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

func (s keysSQL) OwnerKeysNotUnder(ctx context.Context, kek, afterOwner string, limit int) ([]store.OwnerKey, error) {
	var out []store.OwnerKey
	// Two ranges of owner_keys_by_kek rather than kek_fingerprint <> ?,
	// which walked every owner's key in owner order to find the few not
	// under kek: this reads those few (issue 52).
	err := s.db.Read().Query(ctx, s.d.bind(OwnerKeysToRewrap),
		[]any{kek, kek, afterOwner, limit}, func(rows Rows) error {
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

func (s keysSQL) RewrapOwnerKey(ctx context.Context, old store.OwnerKey, wrapped []byte, kek string, at time.Time) error {
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

func (s keysSQL) LegacyBackups(ctx context.Context, afterOwner, afterID string, limit int) ([]store.Backup, error) {
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

func (s keysSQL) RewrapBackupKey(ctx context.Context, owner, id string, oldWrapped, wrapped []byte, ownerKeyID string) error {
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

func (s keysSQL) KeyCounts(ctx context.Context, except string) (store.KeyCounts, error) {
	out := store.KeyCounts{OwnerKeys: map[string]int64{}, LegacyBackups: map[string]int64{}}
	count := func(query string, into map[string]int64, args ...any) error {
		return s.db.Read().Query(ctx, s.d.bind(query), append(args, []byte{}), func(rows Rows) error {
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
	ownerKeys := `SELECT kek_fingerprint, count(*) FROM owner_keys WHERE wrapped_key <> ? GROUP BY kek_fingerprint`
	var args []any
	if except != "" {
		// The ranges of owner_keys_by_kek either side of except.
		ownerKeys = OwnerKeysToRewrapCount
		args = []any{except, except}
	}
	if err := count(ownerKeys, out.OwnerKeys, args...); err != nil {
		return store.KeyCounts{}, fmt.Errorf("%s: count owner keys: %w", s.d.Name, err)
	}
	if err := count(LegacyBackupCount, out.LegacyBackups); err != nil {
		return store.KeyCounts{}, fmt.Errorf("%s: count backups under a KEK: %w", s.d.Name, err)
	}
	return out, nil
}

func (s keysSQL) OwnerKeyKEKs(ctx context.Context) ([]string, error) {
	// A loose index scan of owner_keys_by_kek: the next fingerprint after
	// the last, each a descent of the index (DISTINCT would read every
	// entry; PostgreSQL has no skip scan before 18).
	var out []string
	for last := ""; len(out) < 64; {
		var next *string
		if err := s.db.Read().QueryRow(ctx, s.d.bind(NextOwnerKeyKEK), last).Scan(&next); err != nil {
			return nil, fmt.Errorf("%s: list the KEKs of owner keys: %w", s.d.Name, err)
		}
		if next == nil {
			break
		}
		out = append(out, *next)
		last = *next
	}
	return out, nil
}

func (s keysSQL) DestroyOwnerKey(ctx context.Context, owner string) error {
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

// kekUsable refuses, in the transaction that wraps a row under the KEK
// fingerprint, a KEK that is retired. The fingerprint's lock orders it
// against RetireKEK: a row wrapped under the KEK either commits before the
// retirement (and the rewrap that follows it sees the row) or waits and is
// refused, so a KEK whose rows are all rewrapped gets no new one and can
// be destroyed (issue 46, finding 1).
func (s keysSQL) kekUsable(ctx context.Context, tx Conn, fingerprint string) error {
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

func (s keysSQL) NoteErasure(ctx context.Context, fingerprint, job string, at time.Time) error {
	_, err := s.exec(ctx, s.d.bind(`INSERT INTO kek_retirements (fingerprint, job_id, due_ns, retired_ns, destroyed_ns)
		SELECT ?, ?, ?, COALESCE(max(retired_ns), 0), COALESCE(max(destroyed_ns), 0) FROM kek_retirements WHERE fingerprint = ?
		ON CONFLICT (fingerprint, job_id) DO NOTHING`), fingerprint, job, at.UnixNano(), fingerprint)
	if err != nil {
		return fmt.Errorf("%s: note the erasure's key-encryption key: %w", s.d.Name, err)
	}
	return nil
}

func (s keysSQL) RetireKEK(ctx context.Context, fingerprint string, at time.Time) error {
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

func (s keysSQL) KEKDestroyed(ctx context.Context, fingerprint string, at time.Time) error {
	if _, err := s.exec(ctx, s.d.bind(`UPDATE kek_retirements SET destroyed_ns = ? WHERE fingerprint = ? AND destroyed_ns = 0 AND retired_ns <> 0`),
		at.UnixNano(), fingerprint); err != nil {
		return fmt.Errorf("%s: record the key-encryption key destroyed: %w", s.d.Name, err)
	}
	return nil
}

func (s keysSQL) ListKEKRetirements(ctx context.Context) ([]store.KEKRetirement, error) {
	return s.kekRetirements(ctx, `SELECT fingerprint, job_id, due_ns, retired_ns, destroyed_ns FROM kek_retirements ORDER BY fingerprint, job_id`)
}

func (s keysSQL) ErasureKEKs(ctx context.Context, job string) ([]store.KEKRetirement, error) {
	return s.kekRetirements(ctx, `SELECT fingerprint, job_id, due_ns, retired_ns, destroyed_ns FROM kek_retirements WHERE job_id = ? ORDER BY fingerprint`, job)
}

// kekRetirements reads retirement rows, one KEKRetirement per
// fingerprint (rows arrive in fingerprint order).
func (s keysSQL) kekRetirements(ctx context.Context, query string, args ...any) ([]store.KEKRetirement, error) {
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
