package store

import (
	"context"
	"time"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// OwnerKeys keeps each owner's own key, wrapped by a key-encryption key
// (KEK): the middle of the key hierarchy KEK -> owner key -> backup data
// key. Erasing an owner destroys its row first, which makes every data
// key of the owner, wherever a copy of it lives, unreadable.
type OwnerKeys interface {
	// GetOwnerKey returns owner's key row, or ErrNotFound.
	GetOwnerKey(ctx context.Context, owner string) (OwnerKey, error)
	// CreateOwnerKey stores k unless the owner has a key already, and
	// returns the owner's key as stored: k, or the one another replica
	// stored first.
	CreateOwnerKey(ctx context.Context, k OwnerKey) (OwnerKey, error)
	// OwnerKeysNotUnder returns up to limit key rows, in owner order after
	// afterOwner, wrapped under any KEK but kek: what a rotation to kek
	// has left to rewrap.
	OwnerKeysNotUnder(ctx context.Context, kek, afterOwner string, limit int) ([]OwnerKey, error)
	// RewrapOwnerKey replaces the wrapping of owner's key KeyID from
	// (wrapped, KEK) old to new, only while the row still holds old: a
	// row rewrapped, destroyed or replaced meanwhile is ErrNotFound and
	// unchanged, so two replicas rotating at once cannot lose a key.
	RewrapOwnerKey(ctx context.Context, old OwnerKey, wrapped []byte, kek string, at time.Time) error
	// LegacyBackups returns up to limit backups, in (owner, id) order
	// after (afterOwner, afterID), whose data keys the KEK wraps directly
	// (no owner key): what the owner-key migration has left to rewrap.
	LegacyBackups(ctx context.Context, afterOwner, afterID string, limit int) ([]Backup, error)
	// RewrapBackupKey seals a legacy backup's data key under its owner's
	// key ownerKeyID instead of the KEK, only while the row still holds
	// oldWrapped under no owner key (else ErrNotFound, unchanged).
	RewrapBackupKey(ctx context.Context, owner, id string, oldWrapped, wrapped []byte, ownerKeyID string) error
	// KeyCounts counts, across owners, the owner keys under each KEK but
	// except ("" counts them all) and the backups whose data keys a KEK
	// wraps directly. With except the current KEK, what it reads is the
	// rows still to rewrap, never every owner's key: the key worker's
	// periodic count (issue 52).
	KeyCounts(ctx context.Context, except string) (KeyCounts, error)
	// OwnerKeyKEKs lists the fingerprints of the KEKs that wrap owner
	// keys, in order, at most 64: the KEK check at start, which reads a
	// few index entries a fingerprint, never every owner's key.
	OwnerKeyKEKs(ctx context.Context) ([]string, error)
}

// KEKRetirements records what erasures need of the key-encryption keys.
// An erased owner's key row survives the delete in the database files
// (PostgreSQL's dead tuples and WAL, a copy of a SQLite file), wrapped by
// the KEK; the erasure is complete only once no server holds that KEK. An
// erasure notes the KEK (NoteErasure); the key worker retires it (no new
// row is wrapped under it: CreateOwnerKey and RewrapOwnerKey refuse it
// with ErrKEKRetired), rewraps every row off it and destroys it, and
// records each step.
type KEKRetirements interface {
	// NoteErasure records that erasure job wrapped the key it destroys
	// under the KEK fingerprint. Idempotent.
	NoteErasure(ctx context.Context, fingerprint, job string, at time.Time) error
	// RetireKEK marks the KEK fingerprint retired from at (the first
	// time only): from then on no owner key is created or rewrapped
	// under it, so once its rows are rewrapped none appears again. A
	// fingerprint no erasure noted is recorded for the retirement alone.
	RetireKEK(ctx context.Context, fingerprint string, at time.Time) error
	// KEKDestroyed marks the retired KEK fingerprint gone from the server
	// from at (the first time only).
	KEKDestroyed(ctx context.Context, fingerprint string, at time.Time) error
	// ListKEKRetirements returns every KEK erasures noted or that was
	// retired, by fingerprint, each with its earliest due time and the
	// erasure jobs that wait on it.
	ListKEKRetirements(ctx context.Context) ([]KEKRetirement, error)
	// ErasureKEKs returns the KEKs erasure job noted, by fingerprint.
	ErasureKEKs(ctx context.Context, job string) ([]KEKRetirement, error)
}

// KEKRetirement is one KEK's way out of the server.
type KEKRetirement struct {
	Fingerprint string
	// Due: when the first erasure that needs it gone noted it (zero for
	// a retirement no erasure asked for).
	Due time.Time
	// Retired: from when no row is wrapped under it (zero: not yet).
	Retired time.Time
	// Destroyed: from when the server no longer holds it (zero: not yet).
	Destroyed time.Time
	// Jobs are the erasures waiting on it (ListKEKRetirements only).
	Jobs []string
}

// ErrKEKRetired: the key-encryption key is retired; nothing new is
// wrapped under it. The server reloads its KEK and tries again.
var ErrKEKRetired = fault.New(fault.Unavailable, "the key-encryption key is retired")

// OwnerKey is one owner's key as stored: never the key itself, only its
// wrapping.
type OwnerKey struct {
	Owner string
	// KeyID names this key among every key the owner name has had: a
	// backup row names the key that seals its data key.
	KeyID          string
	Wrapped        []byte
	KEKFingerprint string
	Created        time.Time
	// Rewrapped is when a rotation last rewrapped it (zero: never).
	Rewrapped time.Time
}

// KeyCounts is how many rows each KEK wraps.
type KeyCounts struct {
	// OwnerKeys: owner key rows by the fingerprint of the KEK that wraps
	// them.
	OwnerKeys map[string]int64
	// LegacyBackups: backup rows whose data key a KEK wraps directly, by
	// that KEK's fingerprint ("" for rows older than fingerprints).
	LegacyBackups map[string]int64
}

// Holds are legal holds: an owner, or one backup of it, kept past
// retention, DeleteBackup and erasure while a case lasts.
type Holds interface {
	// SetHold creates the hold (h.Owner, h.ID), or changes its reason,
	// holder and end; its target and creation time stay as first stored.
	SetHold(ctx context.Context, h Hold) error
	// ReleaseHold removes owner's hold id; a missing one is ErrNotFound.
	ReleaseHold(ctx context.Context, owner, id string) error
	// ListHolds returns the owner's holds, in force or not, owner-wide
	// first, then by backup id, each target's oldest first.
	ListHolds(ctx context.Context, owner string) ([]Hold, error)
}

// Hold is one legal hold: its own record, one of any number that may
// stand on the same target.
type Hold struct {
	Owner string
	// ID names the hold among the owner's (the server's, 32 hex digits).
	ID string
	// Backup is the held backup's id; "" holds every backup of the owner,
	// and the owner against erasure.
	Backup, Reason, Principal string
	Created                   time.Time
	// Until is when the hold lapses by itself (zero: when released).
	Until time.Time
}

// InForce reports whether h holds at now.
func (h Hold) InForce(now time.Time) bool { return h.Until.IsZero() || now.Before(h.Until) }

// ErrHeld: a legal hold keeps the backup or the owner.
var ErrHeld = fault.NewReason(fault.FailedPrecondition, fault.ReasonHeld, "under a legal hold")

// ErrOwnerErasing: an erasure of the owner is running, and nothing may
// start for it (or read its backups) until it ends.
var ErrOwnerErasing = fault.NewReason(fault.FailedPrecondition, fault.ReasonOwnerErasing, "the owner is being erased")

// Erasure removes one owner from every table.
type Erasure interface {
	// DestroyOwnerKey deletes owner's key row and blanks the wrapped data
	// key of every backup row of the owner, in one transaction: the
	// first step of an erasure, after which no data key of the owner
	// opens. Idempotent.
	DestroyOwnerKey(ctx context.Context, owner string) error
	// EraseOwnerRows deletes every row of owner from every table that
	// holds owner rows (OwnerRowTables), except the owner's erasure jobs
	// (keep, the erasure's own audit record, and those of earlier
	// erasures of the name), and returns how many it deleted from each. The caller deletes the backups' objects first. Idempotent.
	EraseOwnerRows(ctx context.Context, owner, keep string) (map[string]int64, error)
	// ScrubFreed makes the space deleted rows held unreadable in the live
	// database files as far as the engine allows, after an erasure:
	// SQLite (secure_delete on) checkpoints and truncates its WAL;
	// Postgres vacuums, which frees the space for reuse but does not
	// overwrite it.
	ScrubFreed(ctx context.Context) error
	// RunningErasure returns the id of the erasure (not a dry run) running
	// for owner, or "" when none is: the fence a hold checks before and
	// after it is stored.
	RunningErasure(ctx context.Context, owner string) (string, error)
	// RunningJobsFor returns the ids of the jobs, erasures aside, running
	// for owner or reading its backups (SourceOwner): what an erasure
	// stops before it erases. Once an erasure of owner is stored, the
	// list only shrinks (CreateJob's fence).
	RunningJobsFor(ctx context.Context, owner string) ([]string, error)
	// CountOwnerRows counts owner's rows in each of OwnerRowTables: an
	// erasure's dry run.
	CountOwnerRows(ctx context.Context, owner string) (map[string]int64, error)
	// MarkOwnerErased records that erasure job started for owner at: the
	// name is erased, and stays so (OwnerErased) until ReenableOwner. A
	// second erasure of the name replaces the record and erases it again.
	MarkOwnerErased(ctx context.Context, owner, job string, at time.Time) error
	// OwnerErased returns the name's erasure record, or ErrNotFound for a
	// name never erased.
	OwnerErased(ctx context.Context, owner string) (ErasedOwner, error)
	// ReenableOwner lets the erased name be backed up by schedules again,
	// recording who and why; a name already re-enabled keeps its first
	// re-enabling. A name never erased is ErrNotFound.
	ReenableOwner(ctx context.Context, owner, principal, reason string, at time.Time) (ErasedOwner, error)
}

// ErasedOwner is an owner name's erasure record.
type ErasedOwner struct {
	Owner string
	// Job is the latest erasure's job; Erased when it started.
	Job    string
	Erased time.Time
	// Reenabled is when an operator let schedules back the name up
	// again (zero: not yet), ReenabledBy who and Reason why.
	Reenabled           time.Time
	ReenabledBy, Reason string
}

// Blocked reports whether schedules skip the name.
func (e ErasedOwner) Blocked() bool { return e.Reenabled.IsZero() }

// ErasureRecordTables hold an owner column and are an erasure's own
// record, which it writes rather than deletes.
var ErasureRecordTables = []string{"erased_owners"}

// OwnerRowTables are the tables that hold an owner's rows, in the order
// an erasure deletes from them (children before the rows they name).
// TestErasureCoversEveryOwnerTable holds it against the schema: a table
// with an owner column missing here fails it.
var OwnerRowTables = []string{"messages", "tombstones", "groups", "consent", "owner_changes", "schedule_ticks", "holds", "backups", "owner_keys", "jobs"}
