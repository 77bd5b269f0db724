package store

import (
	"context"
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
	// (the caller deletes its object first). A missing one is ErrNotFound;
	// one that another backup is an increment of, ErrFailedPrecondition.
	DeleteBackup(ctx context.Context, owner, id string) error
	// RecordVerification records that one of the owner's complete
	// backups was read back at "at": problem is empty when every record
	// authenticated and the object matched the catalog, and says what was
	// wrong otherwise. A missing backup is ErrNotFound.
	RecordVerification(ctx context.Context, owner, id string, at time.Time, problem string) error
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
	// Verified is when the backup was last read back (zero: never), and
	// VerifyProblem what that found wrong ("" when nothing).
	Verified      time.Time
	VerifyProblem string
	// Base is the backup this one holds the changes since: "" for a full
	// backup, the id of the owner's previous backup in the chain for an
	// increment. Restoring an increment is restoring its base first.
	Base string
}

// BackupSummary is what a complete backup holds.
type BackupSummary struct {
	Groups, Messages, Consent, Length uint64
	SHA256                            []byte
	ExportedAtNs                      int64
	At                                time.Time
	// ChangeSeq is the owner's change sequence the export's snapshot saw:
	// an increment built on this backup holds what was written after it.
	// -1 for a backup written before changes were tracked, which no
	// increment can build on.
	ChangeSeq int64
}

// BackupQuery selects a page of one owner's backups.
type BackupQuery struct {
	Owner string
	// Schedule, when set, keeps only the backups that schedule wrote.
	Schedule string
	// State, when set, keeps only backups in that state.
	State string
	// Base, when set, keeps only the increments built on that backup.
	Base string
	// Before is the last id of the previous page; empty for the first.
	Before string
	Limit  int
}
