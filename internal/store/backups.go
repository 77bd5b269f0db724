package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Backups is the backup catalog: one row per object the server wrote for
// an owner. Like the conversation tables it is read under one owner: a
// backup is found by (owner, id), so another owner's backup reads as
// ErrNotFound, exactly as a missing one.
type Backups interface {
	// CreateBackup records a backup whose object is being written
	// (BackupWriting). An id already used by the owner is
	// ErrFailedPrecondition.
	CreateBackup(ctx context.Context, b Backup) error
	// CompleteBackup records a written backup's summary and makes it
	// BackupComplete. A backup that is not BackupWriting is
	// ErrFailedPrecondition; a missing one ErrNotFound.
	CompleteBackup(ctx context.Context, owner, id string, s BackupSummary) error
	// GetBackup returns one of the owner's backups or ErrNotFound.
	GetBackup(ctx context.Context, owner, id string) (Backup, error)
	// ListBackups returns up to q.Limit of q.Owner's backups, newest
	// first, before q.Before (an id) when set.
	ListBackups(ctx context.Context, q BackupQuery) ([]Backup, error)
	// DeleteBackup removes one of the owner's backups from the catalog
	// (the caller deletes its object first). A missing one is ErrNotFound.
	DeleteBackup(ctx context.Context, owner, id string) error
}

// Backup states as stored.
const (
	BackupWriting  = "writing"
	BackupComplete = "complete"
)

// Backup is one catalog row.
type Backup struct {
	Owner, ID, State, Label string
	// Bucket is the configured bucket's name, ObjectKey the object's key
	// in it: both chosen by the server.
	Bucket, ObjectKey string
	// JobID, Schedule and Principal say who wrote it.
	JobID, Schedule, Principal string
	// Options is the jobs package's encoding of the export's selection.
	Options []byte
	// WrappedKey is the backup's archive key, encrypted by the server's
	// key-encryption key.
	WrappedKey []byte
	Summary    BackupSummary
	Created    time.Time
	// Completed is zero until the backup is complete.
	Completed time.Time
}

// BackupSummary is what a complete backup holds.
type BackupSummary struct {
	Groups, Messages, Consent, Length uint64
	SHA256                            []byte
	ExportedAtNs                      int64
	At                                time.Time
}

// BackupQuery selects a page of one owner's backups.
type BackupQuery struct {
	Owner string
	// Schedule, when set, keeps only the backups that schedule wrote.
	Schedule string
	// State, when set, keeps only backups in that state.
	State string
	// Before is the last id of the previous page; empty for the first.
	Before string
	Limit  int
}

const backupColumns = `owner, id, state, label, bucket, object_key, job_id, schedule, principal, options, wrapped_key, groups, messages, consent, length, sha256, exported_at_ns, created_ns, completed_ns`

type backupRow struct {
	Backup
	groups, messages, consent, length int64
	createdNs, completedNs            int64
}

func (r *backupRow) dest() []any {
	return []any{&r.Owner, &r.ID, &r.State, &r.Label, &r.Bucket, &r.ObjectKey, &r.JobID, &r.Schedule, &r.Principal,
		&r.Options, &r.WrappedKey, &r.groups, &r.messages, &r.consent, &r.length, &r.Summary.SHA256,
		&r.Summary.ExportedAtNs, &r.createdNs, &r.completedNs}
}

func (r *backupRow) backup() Backup {
	b := r.Backup
	b.Summary.Groups, b.Summary.Messages = uint64(r.groups), uint64(r.messages)
	b.Summary.Consent, b.Summary.Length = uint64(r.consent), uint64(r.length)
	b.Created = time.Unix(0, r.createdNs)
	if r.completedNs != 0 {
		b.Completed = time.Unix(0, r.completedNs)
		b.Summary.At = b.Completed
	}
	return b
}

func (s SQLStore) CreateBackup(ctx context.Context, b Backup) error {
	q := s.d.bind(`INSERT INTO backups (` + backupColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	_, err := s.exec(ctx, q, b.Owner, b.ID, b.State, b.Label, b.Bucket, b.ObjectKey, b.JobID, b.Schedule, b.Principal,
		nonNil(b.Options), nonNil(b.WrappedKey), int64(b.Summary.Groups), int64(b.Summary.Messages), int64(b.Summary.Consent),
		int64(b.Summary.Length), nonNil(b.Summary.SHA256), b.Summary.ExportedAtNs, b.Created.UnixNano(), unixOrZero(b.Completed))
	if uniqueViolation(err) {
		return fmt.Errorf("backup %s exists: %w", b.ID, ErrFailedPrecondition)
	}
	if err != nil {
		return fmt.Errorf("%s: create backup: %w", s.d.Name, err)
	}
	return nil
}

func (s SQLStore) CompleteBackup(ctx context.Context, owner, id string, sum BackupSummary) error {
	n, err := s.exec(ctx, s.d.bind(`UPDATE backups SET state = ?, groups = ?, messages = ?, consent = ?, length = ?, sha256 = ?, exported_at_ns = ?, completed_ns = ? WHERE owner = ? AND id = ? AND state = ?`),
		BackupComplete, int64(sum.Groups), int64(sum.Messages), int64(sum.Consent), int64(sum.Length), nonNil(sum.SHA256),
		sum.ExportedAtNs, sum.At.UnixNano(), owner, id, BackupWriting)
	if err != nil {
		return fmt.Errorf("%s: complete backup: %w", s.d.Name, err)
	}
	if n == 0 {
		b, err := s.GetBackup(ctx, owner, id)
		if err != nil {
			return err
		}
		return fmt.Errorf("backup %s is %s: %w", id, b.State, ErrFailedPrecondition)
	}
	return nil
}

func (s SQLStore) GetBackup(ctx context.Context, owner, id string) (Backup, error) {
	var r backupRow
	err := s.db.Read().QueryRow(ctx, s.d.bind(`SELECT `+backupColumns+` FROM backups WHERE owner = ? AND id = ?`), owner, id).Scan(r.dest()...)
	if errors.Is(err, s.d.NoRows) {
		return Backup{}, fmt.Errorf("backup %.64q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Backup{}, fmt.Errorf("%s: read backup: %w", s.d.Name, err)
	}
	return r.backup(), nil
}

func (s SQLStore) ListBackups(ctx context.Context, q BackupQuery) ([]Backup, error) {
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
	if q.Before != "" {
		query += ` AND id < ?`
		args = append(args, q.Before)
	}
	query += ` ORDER BY owner, id DESC LIMIT ?`
	args = append(args, q.Limit)
	var out []Backup
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
	n, err := s.exec(ctx, s.d.bind(`DELETE FROM backups WHERE owner = ? AND id = ?`), owner, id)
	if err != nil {
		return fmt.Errorf("%s: delete backup: %w", s.d.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("backup %.64q: %w", id, ErrNotFound)
	}
	return nil
}
