package jobs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/gcerrors"

	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Freshness is what monitoring alerts on (deploy/prometheus): each hook,
// when set, hears of one event. The catalog is the truth; a replica that
// starts tells BackupSucceeded each schedule's newest complete backup per
// owner (NewScheduler), so a restart forgets nothing an alert needs.
type Freshness struct {
	// BackupSucceeded: a backup of owner by schedule completed at "at".
	BackupSucceeded func(schedule, owner string, at time.Time)
	// BackupVerified: a backup of owner by schedule was read back at
	// "at"; ok when sound.
	BackupVerified func(schedule, owner string, at time.Time, ok bool)
	// RetentionRan: the schedule's retention ran at "at" (err: it failed).
	RetentionRan func(schedule string, at time.Time, err error)
	// ScheduleInterval: how long the schedule waits between ticks.
	ScheduleInterval func(schedule string, every time.Duration)
	// ExportBlocked: an export of owner (by schedule, "" on demand) ended:
	// blocked when a stored record the export rules refuse stopped it
	// (the job's error names the record), not when it completed. Until
	// an operator excludes or repairs the record (Lint, nonconforming),
	// every backup of the owner fails the same way.
	ExportBlocked func(schedule, owner string, blocked bool)
	// OwnerErased: an erasure of owner completed; nothing should go on
	// naming it (its metric series are deleted).
	OwnerErased func(owner string)
}

// VerifyPolicy re-reads a schedule's stored backups on a cron schedule of
// its own, so that a backup damaged at rest (a flipped byte, a truncated
// or vanished object, a key the KEK no longer unwraps) is found before
// anyone needs it.
type VerifyPolicy struct {
	// Cron is when verification runs, as a schedule's cron.
	Cron string `yaml:"cron"`
	// Sample is how many of each owner's complete backups one run reads,
	// those verified longest ago (never verified first); 0 reads them all.
	Sample int `yaml:"sample"`
}

// Verifier reads backups back from their buckets (Verify), on demand
// (VerifyBackup, bounded per owner and per server) and for schedules
// (VerifyOwner), and records what it found in the catalog.
type Verifier struct {
	cfg     *Config
	keys    *Keys
	catalog *Catalog
	mu      sync.Mutex
	// verifying counts the on-demand verifications running, by owner
	// (under mu).
	verifying map[string]int
}

// Verify reads complete backup b back from its bucket: the object's
// length and SHA-256 against the catalog, every record authenticated
// under the backup's key, and the counts of groups, messages and consent
// against the catalog. It records the result in the catalog, reports it
// (Freshness.BackupVerified), and returns the problem found ("" when none); err is
// a failure to verify at all (the store or the bucket unreachable), when
// nothing is recorded.
func (v *Verifier) Verify(ctx context.Context, b store.Backup) (problem string, err error) {
	problem, err = v.readBack(ctx, b)
	if err != nil {
		return "", err
	}
	if err := v.cfg.Store.RecordVerification(ctx, b.Owner, b.ID, time.Now(), problem); err != nil {
		return "", err
	}
	if problem != "" {
		v.cfg.Log.Error("backup verification failed", zap.String("owner", b.Owner), zap.String("backup", b.ID),
			zap.String("schedule", b.Schedule), zap.String("key", b.ObjectKey), zap.String("problem", problem))
	}
	if v.cfg.Freshness.BackupVerified != nil {
		v.cfg.Freshness.BackupVerified(b.Schedule, b.Owner, time.Now(), problem == "")
	}
	return problem, nil
}

// VerifyBackup verifies one of owner's backups now, on demand, as a
// schedule's verification would (Verify), and returns its catalog row as
// it stands after: Verified and VerifyProblem set. The reading is logged
// with the principal who asked.
func (v *Verifier) VerifyBackup(ctx context.Context, principal, owner, id string) (store.Backup, error) {
	b, err := v.catalog.Backup(ctx, owner, id)
	if err != nil {
		return store.Backup{}, err
	}
	release, err := v.takeVerification(owner)
	if err != nil {
		return store.Backup{}, err
	}
	defer release()
	problem, err := v.Verify(ctx, b)
	if err != nil {
		return store.Backup{}, err
	}
	v.cfg.Log.Info("backup verified on demand", zap.String("principal", principal), zap.String("owner", owner),
		zap.String("backup", id), zap.Bool("sound", problem == ""))
	return v.catalog.Backup(ctx, owner, id)
}

// ErrVerifyBusy: as many verifications run as may, of the owner or on
// the server: the call is refused before it reads a byte, and nothing is
// recorded about the backup (issue 47, finding 7: 20 verifications of one
// owner's backup at once made another owner's sound backup read as
// damaged, for want of memory).
var ErrVerifyBusy = fault.New(fault.Exhausted, "as many verifications run as may (of this owner, or on the server); retry when one ends")

// takeVerification takes a place for an on-demand verification of
// owner's backup, or fails ErrVerifyBusy.
func (v *Verifier) takeVerification(owner string) (release func(), err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	total := 0
	for _, n := range v.verifying {
		total += n
	}
	if v.verifying[owner] >= v.cfg.VerificationsPerOwner || total >= v.cfg.VerificationsAtOnce {
		return nil, ErrVerifyBusy
	}
	v.verifying[owner]++
	return func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.verifying[owner]--; v.verifying[owner] <= 0 {
			delete(v.verifying, owner)
		}
	}, nil
}

func (v *Verifier) readBack(ctx context.Context, b store.Backup) (string, error) {
	if b.State != store.BackupComplete {
		return "", fmt.Errorf("backup %s: %w", b.ID, ErrBackupNotComplete)
	}
	key, err := v.keys.unwrap(ctx, b)
	if errors.Is(err, ErrBackupDamaged) {
		return "its key does not unwrap under the key-encryption key that wrapped it", nil
	}
	if errors.Is(err, ErrKeyUnavailable) {
		// Not the backup's fault: nothing is known about it until the
		// KEK that wrapped it is back.
		return "", err
	}
	if err != nil {
		// The KMS did not answer: nothing is known about the backup.
		return "", fmt.Errorf("backup %s: unwrap key: %w", b.ID, err)
	}
	bucket, err := v.cfg.Buckets.Open(ctx, b.Bucket)
	if err != nil {
		return "", fmt.Errorf("backup %s: %w", b.ID, err)
	}
	obj, err := bucket.NewReader(ctx, b.ObjectKey, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return "its object is gone", nil
	}
	if err != nil {
		return "", fmt.Errorf("backup %s: open object: %w", b.ID, err)
	}
	defer obj.Close()
	readerBudget := v.cfg.Pool.NewCall("verify reader", backup.ReaderReservation(v.cfg.Import.Reader))
	defer readerBudget.Close()
	opts := v.cfg.Import.Reader
	opts.Meter = readerBudget
	digest := sha256.New()
	source := &readFailure{r: obj}
	counted := &countingReader{r: io.TeeReader(source, digest), n: new(atomic.Uint64)}
	rep, err := backup.Verify(counted, key, opts)
	if err != nil {
		return "", err
	}
	if rep.Err != nil {
		// The server's load (its memory budget), the caller's deadline or
		// a cancellation stopped the reading: nothing is known about the
		// backup, and nothing is recorded (issue 47: verifications under
		// load once recorded sound backups as damaged).
		switch fault.Of(rep.Err) {
		case fault.Exhausted, fault.Canceled, fault.DeadlineExceeded, fault.Unavailable:
			return "", fmt.Errorf("backup %s: verification stopped at record %d: %w", b.ID, rep.Records, rep.Err)
		}
	}
	if source.err != nil {
		// The bucket failed mid-read: a transient fault, not damage.
		return "", fmt.Errorf("backup %s: read object: %w", b.ID, source.err)
	}
	// The whole object is read, past a problem too, for its length and digest.
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return "", fmt.Errorf("backup %s: read object: %w", b.ID, err)
	}
	switch n := counted.n.Load(); {
	case rep.Err != nil:
		return fmt.Sprintf("record %d: %v", rep.Records, rep.Err), nil
	case n != b.Summary.Length:
		return fmt.Sprintf("the object is %d bytes; the catalog says %d", n, b.Summary.Length), nil
	case !slices.Equal(digest.Sum(nil), b.Summary.SHA256):
		return "the object's SHA-256 differs from the catalog's", nil
	case rep.Groups != b.Summary.Groups || rep.Messages != b.Summary.Messages || rep.Consent != b.Summary.Consent:
		return fmt.Sprintf("it holds %d groups, %d messages and %d consent records; the catalog says %d, %d and %d",
			rep.Groups, rep.Messages, rep.Consent, b.Summary.Groups, b.Summary.Messages, b.Summary.Consent), nil
	}
	return "", nil
}

// readFailure remembers the first error other than io.EOF its reader
// returned: the bucket's, as opposed to what the archive reader makes of
// the bytes.
type readFailure struct {
	r   io.Reader
	err error
}

func (f *readFailure) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && err != io.EOF && f.err == nil {
		f.err = err
	}
	return n, err
}

// VerifyOwner verifies up to sample (0: all) of owner's complete backups
// that schedule wrote, those verified longest ago first, and returns how
// many it read and how many had a problem.
func (v *Verifier) VerifyOwner(ctx context.Context, schedule, owner string, sample int) (read, failed int, err error) {
	complete, err := v.catalog.completeBackups(ctx, owner, schedule, 0)
	if err != nil {
		return 0, 0, err
	}
	slices.SortStableFunc(complete, func(a, b store.Backup) int { return a.Verified.Compare(b.Verified) })
	if sample > 0 && len(complete) > sample {
		complete = complete[:sample]
	}
	var errs []error
	for _, b := range complete {
		problem, err := v.Verify(ctx, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		read++
		if problem != "" {
			failed++
		}
	}
	return read, failed, errors.Join(errs...)
}
