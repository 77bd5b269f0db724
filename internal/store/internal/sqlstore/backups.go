package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/contentbackup/contentbackup/internal/store"
)

const backupColumns = `owner, id, state, label, bucket, object_key, job_id, schedule, principal, options, wrapped_key, groups, messages, consent, length, sha256, exported_at_ns, created_ns, completed_ns, verified_ns, verify_problem, base_id, change_seq`

type backupRow struct {
	store.Backup
	groups, messages, consent, length  int64
	createdNs, completedNs, verifiedNs int64
}

func (r *backupRow) dest() []any {
	return []any{&r.Owner, &r.ID, &r.State, &r.Label, &r.Bucket, &r.ObjectKey, &r.JobID, &r.Schedule, &r.Principal,
		&r.Options, &r.WrappedKey, &r.groups, &r.messages, &r.consent, &r.length, &r.Summary.SHA256,
		&r.Summary.ExportedAtNs, &r.createdNs, &r.completedNs, &r.verifiedNs, &r.VerifyProblem, &r.Base, &r.Summary.ChangeSeq}
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

func (s SQLStore) CreateBackup(ctx context.Context, b store.Backup) error {
	q := s.d.bind(`INSERT INTO backups (` + backupColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	_, err := s.exec(ctx, q, b.Owner, b.ID, b.State, b.Label, b.Bucket, b.ObjectKey, b.JobID, b.Schedule, b.Principal,
		nonNil(b.Options), nonNil(b.WrappedKey), int64(b.Summary.Groups), int64(b.Summary.Messages), int64(b.Summary.Consent),
		int64(b.Summary.Length), nonNil(b.Summary.SHA256), b.Summary.ExportedAtNs, b.Created.UnixNano(), unixOrZero(b.Completed),
		unixOrZero(b.Verified), b.VerifyProblem, b.Base, b.Summary.ChangeSeq)
	if uniqueViolation(err) {
		return fmt.Errorf("backup %s exists: %w", b.ID, store.ErrFailedPrecondition)
	}
	if err != nil {
		return fmt.Errorf("%s: create backup: %w", s.d.Name, err)
	}
	return nil
}

func (s SQLStore) CompleteBackup(ctx context.Context, owner, id string, sum store.BackupSummary) error {
	n, err := s.exec(ctx, s.d.bind(`UPDATE backups SET state = ?, groups = ?, messages = ?, consent = ?, length = ?, sha256 = ?, exported_at_ns = ?, completed_ns = ?, change_seq = ? WHERE owner = ? AND id = ? AND state = ?`),
		store.BackupComplete, int64(sum.Groups), int64(sum.Messages), int64(sum.Consent), int64(sum.Length), nonNil(sum.SHA256),
		sum.ExportedAtNs, sum.At.UnixNano(), sum.ChangeSeq, owner, id, store.BackupWriting)
	if err != nil {
		return fmt.Errorf("%s: complete backup: %w", s.d.Name, err)
	}
	if n == 0 {
		b, err := s.GetBackup(ctx, owner, id)
		if err != nil {
			return err
		}
		return fmt.Errorf("backup %s is %s: %w", id, b.State, store.ErrFailedPrecondition)
	}
	return nil
}

func (s SQLStore) GetBackup(ctx context.Context, owner, id string) (store.Backup, error) {
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

func (s SQLStore) ListBackups(ctx context.Context, q store.BackupQuery) ([]store.Backup, error) {
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

func (s SQLStore) DeleteBackup(ctx context.Context, owner, id string) error {
	var dependent string
	err := s.db.Write(ctx, func(tx Conn) error {
		err := tx.QueryRow(ctx, s.d.bind(`SELECT id FROM backups WHERE owner = ? AND base_id = ? ORDER BY id LIMIT 1`+s.d.ForUpdate), owner, id).Scan(&dependent)
		switch {
		case err == nil:
			return fmt.Errorf("backup %.64q is the base of backup %.64q, which needs it to restore: delete that first: %w", id, dependent, store.ErrFailedPrecondition)
		case !errors.Is(err, s.d.NoRows):
			return fmt.Errorf("%s: read backups built on %.64q: %w", s.d.Name, id, err)
		}
		n, err := tx.Exec(ctx, s.d.bind(`DELETE FROM backups WHERE owner = ? AND id = ?`), owner, id)
		if err != nil {
			return fmt.Errorf("%s: delete backup: %w", s.d.Name, err)
		}
		if n == 0 {
			return fmt.Errorf("backup %.64q: %w", id, store.ErrNotFound)
		}
		return nil
	})
	return err
}

func (s SQLStore) RecordVerification(ctx context.Context, owner, id string, at time.Time, problem string) error {
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
