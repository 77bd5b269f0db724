package store

import (
	"context"
	"time"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// Backups is the backup catalog: one row per object the server wrote for
// an owner. Like the conversation tables it is read under one owner: a
// backup is found by (owner, id), so another owner's backup reads as
// ErrNotFound, exactly as a missing one.
type Backups interface {
	// CreateBackup records a backup whose object is being written
	// (BackupWriting). An id already used by the owner is
	// ErrFailedPrecondition. An increment (b.Base set) is recorded only
	// while its base is complete, under a lock its base's DeleteBackup and
	// MarkBackupDeleting take too, so an increment and the deletion of its
	// base never both succeed: a base that is gone is ErrNotFound, one
	// being deleted ErrFailedPrecondition.
	CreateBackup(ctx context.Context, b Backup) error
	// CompleteBackup records a written backup's summary and makes it
	// BackupComplete, fenced by the job attempt that wrote it: a row a
	// job created is completed only while that job runs at by.Attempt,
	// checked in the same transaction, so an attempt that lost its job to
	// a takeover commits nothing. (by is the zero Fence only for a row no
	// job wrote.) A backup that is not BackupWriting, or whose job is
	// elsewhere, is ErrFailedPrecondition; a missing one ErrNotFound.
	CompleteBackup(ctx context.Context, owner, id string, by Fence, s BackupSummary) error
	// AbandonBackup removes the WRITING row of an export that failed,
	// fenced as CompleteBackup is: only the attempt that holds the job may
	// remove it, so a stale attempt's cleanup never touches a row a later
	// attempt wrote or completed (ErrFailedPrecondition).
	AbandonBackup(ctx context.Context, owner, id string, by Fence) error
	// MarkBackupDeleting is the first step of deleting a backup: under
	// the row's lock it checks that no legal hold in force keeps it (on
	// the backup or its owner: ErrHeld) and that no increment is built on
	// it (ErrFailedPrecondition names the increment), and marks it
	// BackupDeleting, so no increment can be started on it from then on.
	// The caller then deletes its objects and DeleteBackup the row. A row
	// already BackupDeleting is returned as it is (a retry).
	MarkBackupDeleting(ctx context.Context, owner, id string) (Backup, error)
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
	// WrappingKEKs lists, across owners, the key-encryption keys the
	// catalog's legacy rows (no owner key) are wrapped under: each fingerprint with one wrapped
	// key as a sample ("" for rows written before fingerprints).
	WrappingKEKs(ctx context.Context) ([]WrappingKEK, error)
	// OwnerBackupBytes is what owner's backups hold in their buckets: the
	// archive bytes of its complete backups, for its quota.
	OwnerBackupBytes(ctx context.Context, owner string) (uint64, error)
}

// WrappingKEK is one key-encryption key the catalog is wrapped under.
type WrappingKEK struct {
	Fingerprint string
	Sample      []byte
}

// Backup states as stored.
const (
	BackupWriting  = "writing"
	BackupComplete = "complete"
	// BackupDeleting: a delete has begun (its objects may be partly
	// gone); a retry of the delete finishes it. It is never restored nor
	// built on.
	BackupDeleting = "deleting"
)

// ErrHasIncrement: an increment is built on the backup, which its
// restore needs; the increment goes first.
var ErrHasIncrement = fault.New(fault.FailedPrecondition, "an increment is built on the backup; delete the increment first")

// Fence names the job attempt a catalog write is made by (a fencing
// token: the store refuses an attempt older than the job's).
type Fence struct {
	JobID   string
	Attempt int
}

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
	// WrappedKey is the backup's archive key, sealed by its owner's key
	// OwnerKeyID (keyring.SealDataKey). A row written before owner keys
	// has no OwnerKeyID: its key is encrypted by the server's
	// key-encryption key itself, whose fingerprint KEKFingerprint is (""
	// for a row written before fingerprints were kept), until the key
	// worker rewraps it. An erased owner's rows have none at all.
	WrappedKey     []byte
	KEKFingerprint string
	OwnerKeyID     string
	Summary        BackupSummary
	Created        time.Time
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
	// ObjectKey is the object the completing attempt committed (each
	// attempt writes its own); "" keeps the key the row was created with.
	ObjectKey                         string
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
