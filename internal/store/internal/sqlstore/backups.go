package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

const backupColumns = `owner, id, state, label, bucket, object_key, job_id, schedule, principal, options, wrapped_key, groups, messages, consent, length, sha256, exported_at_ns, created_ns, completed_ns, verified_ns, verify_problem, base_id, change_seq, kek_fingerprint, owner_key_id`

type backupRow struct {
	store.Backup
	groups, messages, consent, length  int64
	createdNs, completedNs, verifiedNs int64
}

func (r *backupRow) dest() []any {
	return []any{&r.Owner, &r.ID, &r.State, &r.Label, &r.Bucket, &r.ObjectKey, &r.JobID, &r.Schedule, &r.Principal,
		&r.Options, &r.WrappedKey, &r.groups, &r.messages, &r.consent, &r.length, &r.Summary.SHA256,
		&r.Summary.ExportedAtNs, &r.createdNs, &r.completedNs, &r.verifiedNs, &r.VerifyProblem, &r.Base, &r.Summary.ChangeSeq, &r.KEKFingerprint, &r.OwnerKeyID}
}

func (r *backupRow) backup() store.Backup {
	b := r.Backup
	b.Summary.Groups, b.Summary.Messages = uint64(r.groups), uint64(r.messages)
	b.Summary.Consent, b.Summary.Length = uint64(r.consent), uint64(r.length)
	b.Created = time.Unix(0, r.createdNs)
	if r.completedNs != 0 {
		b.Completed = time.Unix(0, r.completedNs)
		b.Summary.At = b.Completed
	}
	if r.verifiedNs != 0 {
		b.Verified = time.Unix(0, r.verifiedNs)
	}
	return b
}

func (s backupsSQL) CreateBackup(ctx context.Context, b store.Backup) error {
	q := s.d.bind(`INSERT INTO backups (` + backupColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	return s.db.Write(ctx, func(tx Conn) error {
		if b.Base != "" {
			// The base's row lock, shared: taken exclusively by its
			// delete, so the two serialize and the later one sees the
			// other's row.
			var state string
			err := tx.QueryRow(ctx, s.d.bind(`SELECT state FROM backups WHERE owner = ? AND id = ?`+s.d.ForShare), b.Owner, b.Base).Scan(&state)
			switch {
			case errors.Is(err, s.d.NoRows):
				return fmt.Errorf("base backup %.64q: %w", b.Base, store.ErrNotFound)
			case err != nil:
				return fmt.Errorf("%s: read base backup: %w", s.d.Name, err)
			case state != store.BackupComplete:
				return fmt.Errorf("base backup %.64q is %s: %w", b.Base, state, store.ErrFailedPrecondition)
			}
		}
		_, err := tx.Exec(ctx, q, b.Owner, b.ID, b.State, b.Label, b.Bucket, b.ObjectKey, b.JobID, b.Schedule, b.Principal,
			nonNil(b.Options), nonNil(b.WrappedKey), int64(b.Summary.Groups), int64(b.Summary.Messages), int64(b.Summary.Consent),
			int64(b.Summary.Length), nonNil(b.Summary.SHA256), b.Summary.ExportedAtNs, b.Created.UnixNano(), unixOrZero(b.Completed),
			unixOrZero(b.Verified), b.VerifyProblem, b.Base, b.Summary.ChangeSeq, b.KEKFingerprint, b.OwnerKeyID)
		if uniqueViolation(err) {
			return fmt.Errorf("backup %s exists: %w", b.ID, store.ErrFailedPrecondition)
		}
		if err != nil {
			return fmt.Errorf("%s: create backup: %w", s.d.Name, err)
		}
		return nil
	})
}

// holdsFence checks, under the job row's lock, that by's job runs at
// by's attempt: the fencing check of every catalog write a job makes.
func (s backupsSQL) holdsFence(ctx context.Context, tx Conn, rowJob string, by store.Fence) error {
	if by.JobID != rowJob {
		return &store.FenceLostError{Job: by.JobID, Attempt: by.Attempt, Owner: rowJob}
	}
	if by.JobID == "" {
		return nil
	}
	j, err := s.getJob(ctx, tx, by.JobID, s.d.ForUpdate)
	if errors.Is(err, store.ErrNotFound) {
		return &store.FenceLostError{Job: by.JobID, Attempt: by.Attempt}
	}
	if err != nil {
		return err
	}
	if j.State != store.JobRunning || j.Attempt != by.Attempt {
		return &store.FenceLostError{Job: by.JobID, Attempt: by.Attempt, Holder: j.Attempt, State: j.State}
	}
	return nil
}

// lockBackup reads one of owner's backups under the row's exclusive lock.
func (s backupsSQL) lockBackup(ctx context.Context, tx Conn, owner, id string) (store.Backup, error) {
	var r backupRow
	err := tx.QueryRow(ctx, s.d.bind(`SELECT `+backupColumns+` FROM backups WHERE owner = ? AND id = ?`+s.d.ForUpdate), owner, id).Scan(r.dest()...)
	if errors.Is(err, s.d.NoRows) {
		return store.Backup{}, fmt.Errorf("backup %.64q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Backup{}, fmt.Errorf("%s: read backup: %w", s.d.Name, err)
	}
	return r.backup(), nil
}

// writingUnder locks owner's backup id and returns it while it is being
// written by the job attempt by names: the check every fenced catalog
// write makes in its own transaction.
func (s backupsSQL) writingUnder(ctx context.Context, tx Conn, owner, id string, by store.Fence) (store.Backup, error) {
	b, err := s.lockBackup(ctx, tx, owner, id)
	if err != nil {
		return store.Backup{}, err
	}
	if b.State != store.BackupWriting {
		return store.Backup{}, fmt.Errorf("backup %s is %s: %w", id, b.State, store.ErrFailedPrecondition)
	}
	if err := s.holdsFence(ctx, tx, b.JobID, by); err != nil {
		return store.Backup{}, fmt.Errorf("backup %s: %w", id, err)
	}
	return b, nil
}

func (s backupsSQL) CompleteBackup(ctx context.Context, owner, id string, by store.Fence, sum store.BackupSummary) error {
	return s.db.Write(ctx, func(tx Conn) error {
		b, err := s.writingUnder(ctx, tx, owner, id, by)
		if err != nil {
			return err
		}
		key := sum.ObjectKey
		if key == "" {
			key = b.ObjectKey
		}
		_, err = tx.Exec(ctx, s.d.bind(`UPDATE backups SET state = ?, object_key = ?, groups = ?, messages = ?, consent = ?, length = ?, sha256 = ?, exported_at_ns = ?, completed_ns = ?, change_seq = ? WHERE owner = ? AND id = ?`),
			store.BackupComplete, key, int64(sum.Groups), int64(sum.Messages), int64(sum.Consent), int64(sum.Length), nonNil(sum.SHA256),
			sum.ExportedAtNs, sum.At.UnixNano(), sum.ChangeSeq, owner, id)
		if err != nil {
			return fmt.Errorf("%s: complete backup: %w", s.d.Name, err)
		}
		return nil
	})
}

func (s backupsSQL) AbandonBackup(ctx context.Context, owner, id string, by store.Fence) error {
	return s.db.Write(ctx, func(tx Conn) error {
		if _, err := s.writingUnder(ctx, tx, owner, id, by); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.d.bind(`DELETE FROM backups WHERE owner = ? AND id = ?`), owner, id); err != nil {
			return fmt.Errorf("%s: abandon backup: %w", s.d.Name, err)
		}
		return nil
	})
}

func (s backupsSQL) MarkBackupDeleting(ctx context.Context, owner, id string) (store.Backup, error) {
	var marked store.Backup
	err := s.db.Write(ctx, func(tx Conn) error {
		b, err := s.lockBackup(ctx, tx, owner, id)
		if err != nil {
			return err
		}
		if err := s.notHeld(ctx, tx, owner, id); err != nil {
			return err
		}
		if err := s.noIncrementOn(ctx, tx, owner, id); err != nil {
			return err
		}
		if b.State == store.BackupWriting && b.JobID != "" {
			if j, err := s.getJob(ctx, tx, b.JobID, ""); err == nil && j.State == store.JobRunning {
				return fmt.Errorf("backup %.64q is still being written by job %s: %w", id, b.JobID, store.ErrFailedPrecondition)
			}
		}
		if b.State != store.BackupDeleting {
			if _, err := tx.Exec(ctx, s.d.bind(`UPDATE backups SET state = ? WHERE owner = ? AND id = ?`), store.BackupDeleting, owner, id); err != nil {
				return fmt.Errorf("%s: mark backup deleting: %w", s.d.Name, err)
			}
			b.State = store.BackupDeleting
		}
		marked = b
		return nil
	})
	return marked, err
}

// noIncrementOn refuses when an increment is built on owner's backup id.
// Its caller holds id's row lock, which CreateBackup of an increment
// shares: an increment created before it is seen here, and one created
// after it waits and then finds its base marked or gone.
func (s backupsSQL) noIncrementOn(ctx context.Context, tx Conn, owner, id string) error {
	var dependent string
	err := tx.QueryRow(ctx, s.d.bind(`SELECT id FROM backups WHERE owner = ? AND base_id = ? ORDER BY id LIMIT 1`), owner, id).Scan(&dependent)
	switch {
	case err == nil:
		return fmt.Errorf("backup %.64q is the base of backup %.64q, which needs it to restore: %w", id, dependent, store.ErrHasIncrement)
	case !errors.Is(err, s.d.NoRows):
		return fmt.Errorf("%s: read backups built on %.64q: %w", s.d.Name, id, err)
	}
	return nil
}

func (s backupsSQL) GetBackup(ctx context.Context, owner, id string) (store.Backup, error) {
	var r backupRow
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT `+backupColumns+` FROM backups WHERE owner = ? AND id = ?`), owner, id).Scan(r.dest()...)
	if errors.Is(err, s.d.NoRows) {
		return store.Backup{}, fmt.Errorf("backup %.64q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Backup{}, fmt.Errorf("%s: read backup: %w", s.d.Name, err)
	}
	return r.backup(), nil
}

func (s backupsSQL) ListBackups(ctx context.Context, q store.BackupQuery) ([]store.Backup, error) {
	query := `SELECT ` + backupColumns + ` FROM backups WHERE owner = ?`
	args := []any{q.Owner}
	if q.Schedule != "" {
		query += ` AND schedule = ?`
		args = append(args, q.Schedule)
	}
	if q.State != "" {
		query += ` AND state = ?`
		args = append(args, q.State)
	}
	if q.Base != "" {
		query += ` AND base_id = ?`
		args = append(args, q.Base)
	}
	if q.Before != "" {
		query += ` AND id < ?`
		args = append(args, q.Before)
	}
	query += ` ORDER BY owner, id DESC LIMIT ?`
	args = append(args, q.Limit)
	var out []store.Backup
	err := s.db.Read().Query(ctx, s.d.bind(query), args, func(rows Rows) error {
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
		return nil, fmt.Errorf("%s: list backups: %w", s.d.Name, err)
	}
	return out, nil
}

func (s backupsSQL) DeleteBackup(ctx context.Context, owner, id string) error {
	return s.db.Write(ctx, func(tx Conn) error {
		if _, err := s.lockBackup(ctx, tx, owner, id); err != nil {
			return err
		}
		if err := s.noIncrementOn(ctx, tx, owner, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.d.bind(`DELETE FROM backups WHERE owner = ? AND id = ?`), owner, id); err != nil {
			return fmt.Errorf("%s: delete backup: %w", s.d.Name, err)
		}
		return nil
	})
}

func (s backupsSQL) RecordVerification(ctx context.Context, owner, id string, at time.Time, problem string) error {
	n, err := s.exec(ctx, s.d.bind(`UPDATE backups SET verified_ns = ?, verify_problem = ? WHERE owner = ? AND id = ? AND state = ?`),
		at.UnixNano(), problem, owner, id, store.BackupComplete)
	if err != nil {
		return fmt.Errorf("%s: record verification: %w", s.d.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("backup %s: %w", id, store.ErrNotFound)
	}
	return nil
}

func (s backupsSQL) WrappingKEKs(ctx context.Context) ([]store.WrappingKEK, error) {
	// The fingerprints, then one wrapped key of each to try: fleet-wide
	// reads, bounded by the few KEKs a catalog is ever under, once at
	// start. Two plain statements rather than one with a correlated
	// subquery, which Citus cannot plan over a distributed table.
	var out []store.WrappingKEK
	err := s.db.Read().Query(ctx, `SELECT DISTINCT kek_fingerprint FROM backups WHERE owner_key_id = '' ORDER BY kek_fingerprint LIMIT 64`, nil, func(rows Rows) error {
		for rows.Next() {
			var w store.WrappingKEK
			if err := rows.Scan(&w.Fingerprint); err != nil {
				return err
			}
			out = append(out, w)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: read the catalog's key-encryption keys: %w", s.d.Name, err)
	}
	for i := range out {
		err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT wrapped_key FROM backups WHERE owner_key_id = '' AND kek_fingerprint = ? LIMIT 1`), out[i].Fingerprint).Scan(&out[i].Sample)
		if err != nil {
			return nil, fmt.Errorf("%s: read a key wrapped under %q: %w", s.d.Name, out[i].Fingerprint, err)
		}
	}
	return out, nil
}

func (s backupsSQL) OwnerBackupBytes(ctx context.Context, owner string) (uint64, error) {
	var n int64
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT COALESCE(SUM(length), 0) FROM backups WHERE owner = ?`), owner).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("%s: sum the owner's backups: %w", s.d.Name, err)
	}
	return uint64(max(n, 0)), nil
}
