// Package jobs runs exports and imports on the server, to and from object
// storage (gocloud.dev/blob), as jobs kept in the store: started by
// BackupService, polled through google.longrunning.Operations, and
// scheduled by a cron policy.
//
// Backups belong to their owner: an export's object goes where the server
// decides (under the owner's own prefix), sealed with a fresh data key that
// the catalog keeps wrapped by the key-encryption key, and the catalog row
// is what every later request names. An import reads a catalog backup of
// an owner the caller holds, never a key in a bucket.
//
// The floor's rooms, each a type of its own:
//
//   - Runner (runner.go, takeover.go, describe.go) runs jobs of every
//     kind: it checks a start, takes or queues for a slot (slots.go: fair
//     across owners), stores the job running with a lease and runs its
//     body in a goroutine under an Attempt (attempt.go). While it runs,
//     its progress is written back and its lease renewed every second;
//     that write also reads whether a cancel was asked (possibly on
//     another replica). A job ends exactly once (the store's FinishJob
//     refuses a second end). A server that stops without ending its jobs
//     leaves their leases to run out; then another replica (or the same
//     one restarted) takes each over, up to MaxAttempts runs in all.
//   - The kinds (kind.go): export.go, import.go and erase.go, each one
//     file with its start, its body and what it leaves behind. An export
//     starts again from the beginning, an import runs again (imports are
//     additive and idempotent), an erasure finds less to do.
//   - Catalog (catalog.go, holds.go, retention.go, restore.go, space.go)
//     is the owners' backups; Verifier (verify.go) reads them back; Keys
//     (keeper.go, keys.go, retire.go) is the key hierarchy.
//
// An export writes its object through a blob writer whose context is
// cancelled on any failure, so the object is committed only by a
// successful Close: a failed, cancelled or killed export leaves no object
// under its key. After Close the object's size is checked against what was
// written, and the summary is written beside it as a sidecar.
package jobs

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/blob"

	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Errors the service tells apart.
var (
	// ErrInvalid: the request is malformed; the wrapping error says how.
	ErrInvalid = fault.New(fault.Invalid, "invalid job request")
	// ErrObjectExists: an export would replace an object.
	ErrObjectExists = fault.NewReason(fault.AlreadyExists, fault.ReasonAlreadyExists, "the object exists; exports never replace an object")
	// ErrBackupNotFound: the owner has no such backup. Another owner's
	// backup reads the same, so the error tells nothing of what the
	// caller may not see.
	ErrBackupNotFound = fault.NewReason(fault.NotFound, fault.ReasonBackupNotFound, "no such backup")
	// ErrBackupNotComplete: the backup's export has not finished.
	ErrBackupNotComplete = fault.NewReason(fault.FailedPrecondition, fault.ReasonBackupNotComplete, "the backup is still being written")
	// ErrBackupDamaged: the backup's object or key no longer matches its
	// catalog row; no retry helps.
	ErrBackupDamaged = fault.NewReason(fault.FailedPrecondition, fault.ReasonBackupDamaged, "the backup's object or key does not match the catalog")
	// ErrNoChangeSequence: an increment names a base written before the
	// store tracked changes, so what changed since it is unknown.
	ErrNoChangeSequence = fault.New(fault.FailedPrecondition, "the backup was written before changes were tracked; take a full backup to build increments on")
	// ErrBaseBeforeReplace: the backup was taken before the owner's
	// records were last restored in replace mode, so an increment of it
	// would restore what the replace deleted: take a full backup.
	ErrBaseBeforeReplace = fault.New(fault.FailedPrecondition, "the backup was taken before the owner was last restored in replace mode; take a full backup")
	// ErrBaseNeeded: the backup is the base of an increment, which cannot
	// be restored without it.
	ErrBaseNeeded = store.ErrHasIncrement
	// ErrNoSuchSchedule: the server runs no schedule of that name. It
	// names no owner, so it tells nothing of another owner's data.
	ErrNoSuchSchedule = fault.New(fault.NotFound, "this server runs no schedule of that name")
	// ErrPlanTooLarge: more backups than a retention plan weighs.
	ErrPlanTooLarge = fault.New(fault.FailedPrecondition, "the owner has more backups than a retention plan weighs")
	// ErrKeyUnavailable: the key-encryption key that wrapped the backup's
	// data key is not this server's (another KEK, or its file is gone):
	// the backup is intact, but this server cannot open it.
	ErrKeyUnavailable = fault.NewReason(fault.FailedPrecondition, fault.ReasonKeyUnavailable, "the key-encryption key that wrapped this backup is not available to this server")
	// ErrKEKMismatch: the server's key-encryption key does not match the
	// catalog's; the server runs no job until it does.
	ErrKEKMismatch = fault.NewReason(fault.FailedPrecondition, fault.ReasonKeyUnavailable, "the key-encryption key does not match the catalog")
	// ErrShuttingDown: the server is stopping and starts no job.
	ErrShuttingDown = fault.New(fault.Unavailable, "the server is shutting down")
)

// Config is what the manager runs jobs with.
type Config struct {
	Store store.Store
	// KEK wraps each owner's key, which seals each of its backups' data
	// keys (keys.go). RetiringKEKs are KEKs being rotated away from: they
	// open what they still wrap, and the key worker rewraps that under
	// KEK.
	KEK          *keyring.KEK
	RetiringKEKs []*keyring.KEK
	// AbortUploads aborts (or, for a dry run, counts) the incomplete
	// multipart uploads directly under prefix in a bucket: an erasure
	// leaves none of the owner's parts behind. The binaries set it to
	// internal/drivers.AbortS3Uploads; nil aborts none (file buckets have
	// none).
	AbortUploads func(ctx context.Context, bucket *blob.Bucket, bucketName, prefix string, dryRun bool) (uint64, error)
	Buckets      *Buckets
	Pool         *budget.Pool
	// Import is an import's limits; its Reader.Meter and ReadAhead are set
	// per job from Pool. Its Reader.MaxRecordSize, the largest record the
	// server's limits let in, also sizes an export's reservation
	// (backup.ExportReservation), to which the blob writer's buffer is
	// added.
	Import backup.ImportOptions
	// MaxRunning bounds the jobs this server runs at once (default 4);
	// MaxRunningPerOwner those of one owner (default half of it, at least
	// 1); MaxQueuedPerOwner how many of one owner's jobs may wait for a
	// slot (default 8), past which a start is ErrQueueFull.
	MaxRunning, MaxRunningPerOwner, MaxQueuedPerOwner int
	// VerificationsAtOnce bounds the on-demand verifications (VerifyBackup)
	// this server runs at once (default 4), VerificationsPerOwner those of
	// one owner (default 1); past either the call is ErrVerifyBusy, and
	// nothing is recorded about the backup.
	VerificationsAtOnce, VerificationsPerOwner int
	// KeepFinished is how long an ended job stays listed (default 7 days).
	KeepFinished time.Duration
	// Lease is how long a job stays running without its server renewing
	// it (default 30 s); Renew is how often it is renewed and progress
	// written (default 1 s), which is also how soon a cancel asked on
	// another replica is seen.
	Lease, Renew time.Duration
	Log          *zap.Logger
	// Ended, when set, is told of every job this server ran to its end:
	// kind, state, archive bytes moved and how long it ran (metrics).
	Ended func(kind, state string, bytes uint64, took time.Duration)
	// ScheduleRun, when set, is told how each owner's run of each
	// schedule tick went: "started", "queued", "skipped",
	// "claimed_elsewhere" (another replica runs it) or "erased" (the owner
	// was erased and its name not re-enabled).
	ScheduleRun func(schedule, outcome string)
	// ScheduleMissed, when set, is told of ticks no replica ran, counted
	// when the next tick is claimed.
	ScheduleMissed func(schedule string, ticks int)
	// Replica names this server in the ticks it claims (default: host
	// name, process id and a random suffix, so two servers one process
	// assembles, as tests do, are two replicas).
	Replica string
	// MaxAttempts bounds the runs of one job (default 3): a job whose
	// server stopped is taken over by a replica with a free slot until it
	// has run this many times, and then fails UNAVAILABLE. 1 turns
	// takeover off.
	MaxAttempts int
	// TakenOver, when set, is told of each job this server took over.
	TakenOver func(kind string)
	// Freshness, when set, hears what monitoring alerts on (Freshness).
	Freshness Freshness
	// OwnerQuota bounds the archive bytes of one owner's backups (space.go;
	// default DefaultOwnerQuota, < 0 none); BucketReserve is the free space
	// an export leaves on a file bucket's filesystem (default
	// DefaultBucketReserve, < 0 none).
	OwnerQuota, BucketReserve int64
	// ScheduleClock is the time schedules read when they fire (default
	// time.Now): a fleet test sets it off to play a replica whose clock
	// is skewed.
	ScheduleClock func() time.Time
}

// Manager is the jobs floor assembled: a runner with its kinds
// (export, import, erase), the backup catalog, the verifier and the keys.
// Each is a type of its own; Manager starts the jobs of each kind.
type Manager struct {
	cfg Config
	// Runner runs every job: slots, leases, takeover, cancel, wait.
	Runner *Runner
	// Keys keeps the KEKs and owner keys: backups' data keys are sealed
	// and opened through it, and its worker rewraps and retires.
	Keys *Keys
	// Catalog is the owners' backups: read, listed, held, pruned and
	// deleted through it.
	Catalog *Catalog
	// Verifier reads backups back, on demand and on schedules.
	Verifier *Verifier
	exports  *exports
	imports  *imports
	erasures *erasures
}

// DefaultConfig holds every setting's default, written once: New takes
// them for what a Config leaves unset, and the binary's flags show them
// (cmd/server takes its flag defaults from here).
var DefaultConfig = Config{
	MaxRunning: 4, MaxQueuedPerOwner: 8, KeepFinished: 7 * 24 * time.Hour,
	Lease: 30 * time.Second, Renew: time.Second, MaxAttempts: 3,
	OwnerQuota: DefaultOwnerQuota, BucketReserve: DefaultBucketReserve,
	VerificationsAtOnce: 4, VerificationsPerOwner: 1,
}

// New returns a manager; Run starts its lease reaper.
func New(cfg Config) *Manager {
	d := DefaultConfig
	for _, v := range []struct {
		set *int
		def int
	}{
		{&cfg.MaxRunning, d.MaxRunning}, {&cfg.MaxQueuedPerOwner, d.MaxQueuedPerOwner}, {&cfg.MaxAttempts, d.MaxAttempts},
		{&cfg.VerificationsAtOnce, d.VerificationsAtOnce}, {&cfg.VerificationsPerOwner, d.VerificationsPerOwner},
	} {
		if *v.set <= 0 {
			*v.set = v.def
		}
	}
	if cfg.MaxRunningPerOwner <= 0 {
		// Half the server's slots, at least one: no owner takes them all.
		cfg.MaxRunningPerOwner = max(cfg.MaxRunning/2, 1)
	}
	for _, v := range []struct {
		set *time.Duration
		def time.Duration
	}{
		{&cfg.KeepFinished, d.KeepFinished}, {&cfg.Lease, d.Lease}, {&cfg.Renew, d.Renew},
	} {
		if *v.set <= 0 {
			*v.set = v.def
		}
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.ScheduleClock == nil {
		cfg.ScheduleClock = time.Now
	}
	if cfg.OwnerQuota == 0 {
		cfg.OwnerQuota = d.OwnerQuota
	}
	if cfg.BucketReserve == 0 {
		cfg.BucketReserve = d.BucketReserve
	}
	if cfg.Replica == "" {
		host, _ := os.Hostname()
		cfg.Replica = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), strings.ToLower(rand.Text()[:6]))
	}
	m := &Manager{cfg: cfg}
	m.Runner = newRunner(&m.cfg)
	m.Keys = newKeys(&m.cfg)
	m.Catalog = &Catalog{cfg: &m.cfg, keys: m.Keys}
	m.Verifier = &Verifier{cfg: &m.cfg, keys: m.Keys, catalog: m.Catalog, verifying: map[string]int{}}
	deps := kindDeps{cfg: &m.cfg, catalog: m.Catalog, keys: m.Keys, runner: m.Runner}
	// The job kinds: each is one file (kind.go says what one implements).
	m.exports = &exports{deps}
	m.imports = &imports{deps}
	m.erasures = &erasures{deps}
	m.Runner.register(store.JobExport, m.exports)
	m.Runner.register(store.JobImport, m.imports)
	m.Runner.register(store.JobErase, m.erasures)
	m.Runner.register(store.JobEraseDryRun, m.erasures)
	return m
}

// Buckets are the buckets jobs may use.
func (m *Manager) Buckets() *Buckets { return m.cfg.Buckets }

// prepared is what Start opened for a job before storing it.
type prepared struct {
	key    []byte
	bucket *blob.Bucket
	backup store.Backup
	total  uint64
	// schedule, when set, prunes its backups of the owner once the export
	// has ended well.
	schedule *Schedule
	// sourceOwner is an import's backup owner.
	sourceOwner string
	// changedAfter makes an export an increment: its base's change
	// sequence.
	changedAfter *int64
}

// StartExport starts an export job for principal: a new backup of the
// owner in the bucket it names, at a key the server chooses.
func (m *Manager) StartExport(ctx context.Context, principal string, req ExportRequest) (store.Job, error) {
	return m.exports.start(ctx, principal, req, nil)
}

// StartImport starts an import job for principal: a complete backup of
// req.SourceOwner (or of req.Owner) read into req.Owner. The edge has
// checked that the principal may read the one and write the other.
func (m *Manager) StartImport(ctx context.Context, principal string, req ImportRequest) (store.Job, error) {
	return m.imports.start(ctx, principal, req)
}

// StartErase starts an erasure of req.Owner for principal (erase.go).
func (m *Manager) StartErase(ctx context.Context, principal string, req EraseRequest) (store.Job, error) {
	return m.erasures.start(ctx, principal, req)
}
