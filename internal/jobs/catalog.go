package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/contentbackup/contentbackup/internal/store"
)

// Catalog is the owners' backups as this server keeps them: the catalog
// rows and their objects, read, listed, opened and deleted; the holds
// that keep them (holds.go); the retention that prunes them
// (retention.go, schedule.go); the chains increments form (restore.go);
// and the space they may take (space.go).
type Catalog struct {
	cfg  *Config
	keys *Keys
	// schedules is the policy this server's scheduler runs (nil: none),
	// for PlanRetention.
	schedules atomic.Pointer[SchedulePolicy]
}

// openBucket opens a configured bucket; an unknown name is invalid, and
// the error does not list the configured ones.
func (cat *Catalog) openBucket(ctx context.Context, name string) (*blob.Bucket, error) {
	bucket, err := cat.cfg.Buckets.Open(ctx, name)
	if errors.Is(err, ErrUnknownBucket) {
		return nil, invalid(fmt.Errorf("bucket %.64q: %w", name, ErrUnknownBucket))
	}
	return bucket, err
}

// openBackup reads a complete backup of owner and unwraps its key.
func (cat *Catalog) openBackup(ctx context.Context, owner, id string) (store.Backup, []byte, error) {
	b, err := cat.Backup(ctx, owner, id)
	if err != nil {
		return store.Backup{}, nil, err
	}
	if b.State != store.BackupComplete {
		return store.Backup{}, nil, fmt.Errorf("backup %s: %w", b.ID, ErrBackupNotComplete)
	}
	key, err := cat.keys.unwrap(ctx, b)
	if err != nil {
		return store.Backup{}, nil, err
	}
	return b, key, nil
}

// Backup returns one of owner's backups. An id of the wrong form is
// ErrInvalid; a missing backup, and so another owner's, ErrBackupNotFound.
func (cat *Catalog) Backup(ctx context.Context, owner, id string) (store.Backup, error) {
	if err := CheckBackupID(id); err != nil {
		return store.Backup{}, invalid(err)
	}
	b, err := cat.cfg.Store.GetBackup(ctx, owner, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Backup{}, fmt.Errorf("backup %s: %w", id, ErrBackupNotFound)
	}
	return b, err
}

// ListBackups returns a page of owner's backups, newest first.
func (cat *Catalog) ListBackups(ctx context.Context, owner, before string, limit int) ([]store.Backup, error) {
	return cat.cfg.Store.ListBackups(ctx, store.BackupQuery{Owner: owner, Before: before, Limit: limit})
}

// BackupKey returns a complete backup's archive key, and logs the
// handing out as an audit event.
func (cat *Catalog) BackupKey(ctx context.Context, principal, owner, id string) ([]byte, error) {
	b, key, err := cat.openBackup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	cat.cfg.Log.Info("audit: backup key handed out", zap.String("audit", "backup.key"),
		zap.String("principal", principal), zap.String("owner", owner), zap.String("backup", b.ID))
	return key, nil
}

// DeleteBackup deletes a backup: its sidecar, its object, then its
// catalog row, so a failure part-way leaves a row that a retry finishes.
// A backup whose export still runs is ErrBackupNotComplete.
func (cat *Catalog) DeleteBackup(ctx context.Context, principal, owner, id string) error {
	b, err := cat.Backup(ctx, owner, id)
	if err != nil {
		return err
	}
	if b.State != store.BackupComplete {
		// A WRITING row is refused while its export runs; once its job
		// has ended (a row a crash left behind), it is deleted like any.
		if j, err := cat.cfg.Store.GetJob(ctx, b.JobID); err == nil && j.State == store.JobRunning {
			return fmt.Errorf("backup %s: %w", b.ID, ErrBackupNotComplete)
		}
	}
	if err := cat.deleteBackup(ctx, b); err != nil {
		return err
	}
	cat.cfg.Log.Info("audit: backup deleted", zap.String("audit", "backup.delete"),
		zap.String("principal", principal), zap.String("owner", owner), zap.String("backup", b.ID))
	return nil
}

// deleteBackup deletes b in three steps: the catalog marks it deleting
// (under its row's lock, refused when an increment is built on it, and
// from then on no increment can start on it), its objects go, then its
// row. A failure part-way leaves a row marked deleting that a retry
// finishes.
func (cat *Catalog) deleteBackup(ctx context.Context, b store.Backup) error {
	_, err := cat.deleteBackupCounting(ctx, b)
	return err
}

// deleteBackupCounting is deleteBackup, also counting the objects it
// deleted (an erasure reports them).
func (cat *Catalog) deleteBackupCounting(ctx context.Context, b store.Backup) (objects uint64, err error) {
	b, err = cat.cfg.Store.MarkBackupDeleting(ctx, b.Owner, b.ID)
	if errors.Is(err, store.ErrFailedPrecondition) && !errors.Is(err, ErrBaseNeeded) {
		// Its export started again after the caller read the row.
		return 0, fmt.Errorf("%w: %w", ErrBackupNotComplete, err)
	}
	if err != nil {
		return 0, err
	}
	bucket, err := cat.cfg.Buckets.Open(ctx, b.Bucket)
	if err != nil {
		return 0, fmt.Errorf("backup %s: %w", b.ID, err)
	}
	if b.Completed.IsZero() {
		// Never completed: any attempt may have left an object.
		n, err := cat.deleteAttempts(ctx, bucket, b.ObjectKey, 1, cat.cfg.MaxAttempts)
		objects += n
		if err != nil {
			return objects, fmt.Errorf("backup %s: %w", b.ID, err)
		}
	} else {
		for _, k := range []string{b.ObjectKey + SidecarSuffix, b.ObjectKey} {
			err := bucket.Delete(ctx, k)
			if err == nil {
				objects++
			} else if gcerrors.Code(err) != gcerrors.NotFound {
				return objects, fmt.Errorf("backup %s: delete object: %w", b.ID, err)
			}
		}
	}
	if err := cat.cfg.Store.DeleteBackup(ctx, b.Owner, b.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return objects, err
	}
	return objects, nil
}

// deleteAttempts deletes the objects and sidecars attempts from..to
// wrote for a backup created at key; what is missing is no error, and
// what fails is logged (an object no catalog row names is no backup).
func (cat *Catalog) deleteAttempts(ctx context.Context, bucket *blob.Bucket, key string, from, to int) (deleted uint64, first error) {
	for a := from; a <= to; a++ {
		k := AttemptKey(key, a)
		for _, obj := range []string{k + SidecarSuffix, k} {
			err := bucket.Delete(ctx, obj)
			if err == nil {
				deleted++
			}
			if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				cat.cfg.Log.Warn("an attempt's object not deleted", zap.String("key", obj), zap.Error(err))
				if first == nil {
					first = fmt.Errorf("delete object: %w", err)
				}
			}
		}
	}
	return deleted, first
}
