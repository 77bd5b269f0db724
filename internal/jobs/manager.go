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
// A job's life: Start checks the request, opens its key and bucket, takes
// or queues for a slot (slots.go: fair across owners), stores the job
// running with a lease and runs it in a goroutine. While it runs,
// its progress is written back and its lease renewed every second; that
// write also reads whether a cancel was asked (possibly on another
// replica). A job ends exactly once (the store's FinishJob refuses a
// second end). A server that stops without ending its jobs leaves their
// leases to run out; then another replica (or the same one restarted)
// takes each over, up to MaxAttempts runs in all (takeover.go): an export
// starts again from the beginning, an import runs again (imports are
// additive and idempotent). A job that has used its attempts fails.
//
// An export writes its object through a blob writer whose context is
// cancelled on any failure, so the object is committed only by a
// successful Close: a failed, cancelled or killed export leaves no object
// under its key. After Close the object's size is checked against what was
// written, and the summary is written beside it as a sidecar.
package jobs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	dsb "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Errors the service tells apart.
var (
	// ErrInvalid: the request is malformed; the wrapping error says how.
	ErrInvalid = fault.New(fault.Invalid, "invalid job request")
	// ErrObjectExists: an export would replace an object.
	ErrObjectExists = fault.New(fault.AlreadyExists, "the object exists; exports never replace an object")
	// ErrBackupNotFound: the owner has no such backup. Another owner's
	// backup reads the same, so the error tells nothing of what the
	// caller may not see.
	ErrBackupNotFound = fault.New(fault.NotFound, "no such backup")
	// ErrBackupNotComplete: the backup's export has not finished.
	ErrBackupNotComplete = fault.New(fault.FailedPrecondition, "the backup is still being written")
	// ErrBackupDamaged: the backup's object or key no longer matches its
	// catalog row; no retry helps.
	ErrBackupDamaged = fault.New(fault.FailedPrecondition, "the backup's object or key does not match the catalog")
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
	ErrKeyUnavailable = fault.New(fault.FailedPrecondition, "the key-encryption key that wrapped this backup is not available to this server")
	// ErrKEKMismatch: the server's key-encryption key does not match the
	// catalog's; the server runs no job until it does.
	ErrKEKMismatch = fault.New(fault.FailedPrecondition, "the key-encryption key does not match the catalog")
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
	// name and process id).
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

// blobBufferSize is the blob writer's buffer: an S3 multipart part (at
// least 5 MiB), one at a time.
const blobBufferSize = 8 << 20

// Manager starts, runs, cancels and expires jobs.
type Manager struct {
	cfg     Config
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	slots   *slots
	mu      sync.Mutex
	running map[string]*run // started here and not ended: queued or running
	closed  bool
	// Keys keeps the KEKs and owner keys: backups' data keys are sealed
	// and opened through it, and its worker rewraps and retires.
	Keys *Keys
	// Catalog is the owners' backups: read, listed, held, pruned and
	// deleted through it.
	Catalog *Catalog
	// Verifier reads backups back, on demand and on schedules.
	Verifier *Verifier
}

// New returns a manager; Run starts its lease reaper.
func New(cfg Config) *Manager {
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 4
	}
	if cfg.MaxRunningPerOwner <= 0 {
		cfg.MaxRunningPerOwner = max(cfg.MaxRunning/2, 1)
	}
	if cfg.MaxQueuedPerOwner <= 0 {
		cfg.MaxQueuedPerOwner = 8
	}
	if cfg.KeepFinished <= 0 {
		cfg.KeepFinished = 7 * 24 * time.Hour
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Renew <= 0 {
		cfg.Renew = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.ScheduleClock == nil {
		cfg.ScheduleClock = time.Now
	}
	if cfg.OwnerQuota == 0 {
		cfg.OwnerQuota = DefaultOwnerQuota
	}
	if cfg.BucketReserve == 0 {
		cfg.BucketReserve = DefaultBucketReserve
	}
	if cfg.Replica == "" {
		host, _ := os.Hostname()
		cfg.Replica = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if cfg.VerificationsAtOnce <= 0 {
		cfg.VerificationsAtOnce = 4
	}
	if cfg.VerificationsPerOwner <= 0 {
		cfg.VerificationsPerOwner = 1
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &Manager{cfg: cfg, ctx: ctx, stop: stop, running: map[string]*run{},
		slots: newSlots(cfg.MaxRunning, cfg.MaxRunningPerOwner, cfg.MaxQueuedPerOwner)}
	m.Keys = newKeys(&m.cfg)
	m.Catalog = &Catalog{cfg: &m.cfg, keys: m.Keys}
	m.Verifier = &Verifier{cfg: &m.cfg, keys: m.Keys, catalog: m.Catalog, verifying: map[string]int{}}
	return m
}

// Running is how many jobs this server runs now, not counting the queued.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running) - m.slots.queued()
}

// Queued is how many jobs wait for a slot.
func (m *Manager) Queued() int { return m.slots.queued() }

// Buckets are the buckets jobs may use.
func (m *Manager) Buckets() *Buckets { return m.cfg.Buckets }

// msgServerStopped ends a job whose server stopped without ending it.
const msgServerStopped = "the server running this job stopped before it finished, on every attempt; an export commits nothing, an import keeps what it applied (imports are additive); start the job again"

// Run, every third of a lease period, takes over the running jobs whose
// server stopped while it has slots free, fails those that have used
// their attempts, and deletes the jobs that ended more than KeepFinished
// ago, until ctx is done: once at start, so a restarted server picks up
// its own dead jobs as soon as their leases end.
func (m *Manager) Run(ctx context.Context) {
	tick := time.NewTicker(max(m.cfg.Lease/3, 100*time.Millisecond))
	defer tick.Stop()
	for {
		ids, err := m.cfg.Store.ExpireJobs(ctx, time.Now(), m.cfg.MaxAttempts, int32(fault.Unavailable), msgServerStopped)
		if err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("expire jobs", zap.Error(err))
		}
		for _, id := range ids {
			m.cfg.Log.Warn("job failed: its server stopped", zap.String("job", id))
			m.forgetDeadBackup(ctx, id)
		}
		m.takeOver(ctx)
		if n, err := m.cfg.Store.DeleteFinishedJobs(ctx, time.Now().Add(-m.cfg.KeepFinished), 1000); err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("delete finished jobs", zap.Error(err))
		} else if n > 0 {
			m.cfg.Log.Info("finished jobs deleted", zap.Int("count", n), zap.Duration("older_than", m.cfg.KeepFinished))
		}
		select {
		case <-ctx.Done():
			return
		case <-m.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// forgetDeadBackup deletes the catalog row of an export whose server
// died: the row was WRITING and its object was never committed (an
// aborted upload is no object), so it is no backup.
func (m *Manager) forgetDeadBackup(ctx context.Context, jobID string) {
	j, err := m.cfg.Store.GetJob(ctx, jobID)
	if err != nil || j.Kind != store.JobExport {
		return
	}
	md, err := Progress(j)
	if err != nil || md.GetBackup() == "" {
		return
	}
	b, err := m.cfg.Store.GetBackup(ctx, j.Owner, md.GetBackup())
	if err != nil || b.State != store.BackupWriting {
		return
	}
	if err := m.Catalog.deleteBackup(ctx, b); err != nil {
		m.cfg.Log.Warn("dead export's catalog row not deleted", zap.String("job", jobID), zap.String("backup", b.ID), zap.Error(err))
	}
}

// Close cancels the jobs this server runs (they end failed, UNAVAILABLE)
// and waits for them to end, or for ctx.
func (m *Manager) Close(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	for _, r := range m.running {
		r.cancel(errShutdown)
	}
	m.mu.Unlock()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	m.stop()
}

var (
	errShutdown  = errors.New("the server shut down before the job finished")
	errCancelled = errors.New("cancelled")
	errLost      = errors.New("the job was lost to another replica (its lease ran out)")
)

// ended says what a job that stopped part-way leaves behind: an export
// commits nothing; an import keeps what it applied, which is safe to
// apply again (ARCH import is additive and idempotent).
func ended(kind, what string) string {
	switch kind {
	case store.JobImport:
		return what + importLeftBehind
	case store.JobErase:
		return what + "; what it erased stays erased (the owner's key first), and starting the erasure again finishes it"
	case store.JobEraseDryRun:
		return what + "; a dry run erases nothing"
	}
	return what + "; nothing was committed"
}

const importLeftBehind = "; the records applied so far stay, and starting the import again completes it"

// run is one job this server is running.
type run struct {
	ticket  *ticket
	job     store.Job
	meta    *pv.JobProgress
	cancel  context.CancelCauseFunc
	bytes   atomic.Uint64
	records atomic.Uint64
	phase   atomic.Int32
}

// fence is r's fencing token: the job and the attempt this runner holds.
func (r *run) fence() store.Fence { return store.Fence{JobID: r.job.ID, Attempt: r.job.Attempt} }

func (r *run) progress() []byte {
	md := proto.Clone(r.meta).(*pv.JobProgress)
	md.BytesDone = r.bytes.Load()
	if md.RecordsDone == 0 {
		md.RecordsDone = r.records.Load() // the final count, once known, stays
	}
	md.Phase = pv.JobPhase(r.phase.Load())
	b, _ := proto.Marshal(md)
	return b
}

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
	return m.startExport(ctx, principal, req, nil)
}

func (m *Manager) startExport(ctx context.Context, principal string, req ExportRequest, sched *Schedule) (store.Job, error) {
	owner := req.Owner
	if err := records.CheckOwner(owner); err != nil {
		return store.Job{}, invalid(err)
	}
	if j, seen, err := m.seen(ctx, owner, store.JobExport, req.RequestID); seen || err != nil {
		return j, err
	}
	if err := checkLabel(req.Label); err != nil {
		return store.Job{}, invalid(err)
	}
	if _, err := backup.Resolve(req.Options); err != nil {
		return store.Job{}, invalid(err)
	}
	var changedAfter *int64
	if req.From != "" {
		opts, err := m.synthesisSource(ctx, owner, req)
		if err != nil {
			return store.Job{}, err
		}
		req.Options = opts
		if req.Label == "" {
			req.Label = "synthetic full of " + req.From
		}
	}
	if req.Since != "" {
		base, opts, err := m.chainBase(ctx, owner, req.Since, req.Options)
		if err != nil {
			return store.Job{}, err
		}
		req.Options, changedAfter = opts, &base.Summary.ChangeSeq
	}
	bucketName := req.Bucket
	if bucketName == "" {
		bucketName = m.cfg.Buckets.Default()
	}
	bucket, err := m.Catalog.openBucket(ctx, bucketName)
	if err != nil {
		return store.Job{}, err
	}
	if _, err := m.Catalog.admitSpace(ctx, owner, bucketName); err != nil {
		return store.Job{}, err
	}
	options, err := proto.Marshal(req.Options)
	if err != nil {
		return store.Job{}, fmt.Errorf("encode options: %w", err)
	}
	now := time.Now()
	id := NewID(now)
	key, wrapped, ownerKeyID, err := m.Keys.newDataKey(ctx, owner, id)
	if err != nil {
		return store.Job{}, fmt.Errorf("data key: %w", err)
	}
	prefix, schedule := "", ""
	if sched != nil {
		prefix, schedule = sched.Prefix, sched.Name
	}
	b := store.Backup{Owner: owner, ID: id, State: store.BackupWriting, Label: req.Label,
		Bucket: bucketName, ObjectKey: ownerDir(prefix, owner) + id + ArchiveSuffix,
		Schedule: schedule, Principal: principal, Options: options, WrappedKey: wrapped, OwnerKeyID: ownerKeyID, Created: now, Base: req.Since}
	return m.start(ctx, store.JobExport, principal, req, prepared{key: key, bucket: bucket, backup: b, schedule: sched, changedAfter: changedAfter})
}

// chainBase reads the base an increment of owner names: one of the
// owner's complete backups whose change sequence is known (another
// owner's reads as missing). The increment keeps the base's options:
// given none it takes them, given others it is refused, since a chain
// whose members select differently restores to neither selection.
func (m *Manager) chainBase(ctx context.Context, owner, id string, opts *dsb.ArchiveOptions) (store.Backup, *dsb.ArchiveOptions, error) {
	base, err := m.Catalog.Backup(ctx, owner, id)
	if err != nil {
		return store.Backup{}, nil, fmt.Errorf("since_backup: %w", err)
	}
	if base.State != store.BackupComplete {
		return store.Backup{}, nil, fmt.Errorf("since_backup %s: %w", base.ID, ErrBackupNotComplete)
	}
	if base.Summary.ChangeSeq < 0 {
		return store.Backup{}, nil, fmt.Errorf("since_backup %s: %w", base.ID, ErrNoChangeSequence)
	}
	floor, err := m.cfg.Store.BaseFloor(ctx, owner)
	if err != nil {
		return store.Backup{}, nil, err
	}
	if base.Summary.ChangeSeq < floor {
		return store.Backup{}, nil, fmt.Errorf("since_backup %s: %w", base.ID, ErrBaseBeforeReplace)
	}
	baseOpts, err := optionsOf(base)
	if err != nil {
		return store.Backup{}, nil, fmt.Errorf("since_backup: %w", err)
	}
	if opts == nil {
		return base, baseOpts, nil
	}
	if !sameOptions(baseOpts, opts) {
		return store.Backup{}, nil, invalid(fmt.Errorf("options: an increment keeps the options of its base %s; omit them", base.ID))
	}
	return base, opts, nil
}

// StartImport starts an import job for principal: a complete backup of
// req.source_owner (or of req.owner) read into req.owner. The edge has
// checked that the principal may read the one and write the other.
func (m *Manager) StartImport(ctx context.Context, principal string, req ImportRequest) (store.Job, error) {
	if err := records.CheckOwner(req.Owner); err != nil {
		return store.Job{}, invalid(err)
	}
	if j, seen, err := m.seen(ctx, req.Owner, store.JobImport, req.RequestID); seen || err != nil {
		return j, err
	}
	source := req.SourceOwner
	if source == "" {
		source = req.Owner
	}
	if err := records.CheckOwner(source); err != nil {
		return store.Job{}, invalid(fmt.Errorf("source_owner: %w", err))
	}
	if req.Replace && req.ValidateOnly {
		return store.Job{}, invalid(errors.New("validate_only: not with mode IMPORT_MODE_REPLACE"))
	}
	b, key, err := m.Catalog.openBackup(ctx, source, req.Backup)
	if err != nil {
		return store.Job{}, err
	}
	bucket, err := m.cfg.Buckets.Open(ctx, b.Bucket)
	if err != nil {
		return store.Job{}, fmt.Errorf("backup %s: %w", b.ID, err)
	}
	// An increment restores as its whole chain: every member must be
	// there before the job starts.
	chain, err := m.Catalog.chainOf(ctx, source, b)
	if err != nil {
		return store.Job{}, err
	}
	for _, member := range chain {
		if err := m.Catalog.checkObject(ctx, member); err != nil {
			return store.Job{}, err
		}
	}
	return m.start(ctx, store.JobImport, principal, req, prepared{key: key, bucket: bucket, backup: b, total: chainLength(chain), sourceOwner: source})
}

// request is an ExportRequest or an ImportRequest.
type request interface {
	owner() string
	requestID() string
	spec() ([]byte, error)
}

func (req ExportRequest) owner() string     { return req.Owner }
func (req ExportRequest) requestID() string { return req.RequestID }
func (req ImportRequest) owner() string     { return req.Owner }
func (req ImportRequest) requestID() string { return req.RequestID }

// requestIDPattern is what a request_id may be (AIP-155 suggests a UUID).
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// seen returns the owner's job of kind started with requestID, when there
// is one: a start that repeats a request id starts nothing (AIP-155).
func (m *Manager) seen(ctx context.Context, owner, kind, requestID string) (store.Job, bool, error) {
	if requestID == "" {
		return store.Job{}, false, nil
	}
	if !requestIDPattern.MatchString(requestID) {
		return store.Job{}, false, invalid(fmt.Errorf("request_id %.64q: 1-64 letters, digits, '-' or '_'", requestID))
	}
	j, err := m.cfg.Store.GetJobByRequest(ctx, owner, kind, requestID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Job{}, false, nil
	case err != nil:
		return store.Job{}, false, err
	}
	return j, true, nil
}

func (m *Manager) start(ctx context.Context, kind, principal string, req request, p prepared) (store.Job, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return store.Job{}, ErrShuttingDown
	}
	m.mu.Unlock()
	// Held from here: a slot or a place in the owner's queue, given back
	// if the job is not stored.
	tk, err := m.slots.take(req.owner())
	if err != nil {
		return store.Job{}, err
	}
	now := time.Now()
	id := NewID(now)
	r := &run{ticket: tk}
	m.mu.Lock()
	m.running[id] = r
	m.mu.Unlock()
	abandon := func() {
		m.forget(id)
		m.slots.giveUp(tk)
	}

	spec, err := req.spec()
	if err != nil {
		abandon()
		return store.Job{}, fmt.Errorf("encode job: %w", err)
	}
	phase := pv.JobPhase_JOB_PHASE_QUEUED
	if granted(tk) {
		phase = pv.JobPhase_JOB_PHASE_STARTING
	}
	md := &pv.JobProgress{Owner: req.owner(), Principal: principal, Phase: phase, BytesTotal: p.total, Backup: p.backup.ID,
		Object: &pv.ObjectLocation{Bucket: p.backup.Bucket, Key: p.backup.ObjectKey}}
	switch kind {
	case store.JobExport:
		md.Kind = pv.JobKind_JOB_KIND_EXPORT
		p.backup.JobID = id
	case store.JobErase, store.JobEraseDryRun:
		md.Kind = pv.JobKind_JOB_KIND_ERASE
		md.Object = nil
		md.ValidateOnly = kind == store.JobEraseDryRun
	case store.JobImport:
		md.Kind = pv.JobKind_JOB_KIND_IMPORT
		if ir, ok := req.(ImportRequest); ok {
			md.ValidateOnly = ir.ValidateOnly
		}
		if p.sourceOwner != req.owner() {
			md.SourceOwner = p.sourceOwner
		}
	}
	r.meta = md
	r.phase.Store(int32(md.Phase))
	job := store.Job{ID: id, Kind: kind, Owner: req.owner(), Principal: principal, State: store.JobRunning, RequestID: req.requestID(), Attempt: 1,
		Spec: spec, Progress: r.progress(), LeaseUntil: now.Add(m.cfg.Lease), Created: now, Updated: now}
	if kind == store.JobImport && p.sourceOwner != req.owner() {
		job.SourceOwner = p.sourceOwner
	}
	if err := m.cfg.Store.CreateJob(ctx, job); err != nil {
		abandon()
		if errors.Is(err, store.ErrRequestSeen) {
			// A start with the same request id won the race to the store.
			return m.cfg.Store.GetJobByRequest(ctx, req.owner(), kind, req.requestID())
		}
		return store.Job{}, err
	}
	if kind == store.JobExport {
		if err := m.cfg.Store.CreateBackup(ctx, p.backup); err != nil {
			m.endUnstarted(job, err)
			abandon()
			return store.Job{}, err
		}
	}
	if kind == store.JobImport && p.sourceOwner != req.owner() {
		m.cfg.Log.Info("audit: backup restored into another owner", zap.String("audit", "backup.migrate"),
			zap.String("principal", principal), zap.String("source_owner", p.sourceOwner),
			zap.String("owner", req.owner()), zap.String("backup", p.backup.ID), zap.String("job", id),
			zap.Bool("validate_only", md.GetValidateOnly()))
	}
	r.job = job
	runCtx, cancel := context.WithCancelCause(m.ctx)
	r.cancel = cancel
	m.wg.Add(1)
	go m.execute(runCtx, r, req, p)
	return job, nil
}

// endUnstarted fails a stored job that never ran.
func (m *Manager) endUnstarted(j store.Job, cause error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), 10*time.Second)
	defer cancel()
	m.cfg.Log.Warn("job not started", zap.String("job", j.ID), zap.Error(cause))
	_ = m.cfg.Store.FinishJob(fctx, j.ID, j.Attempt, store.JobEnd{State: store.JobFailed, At: time.Now(),
		ErrorCode: int32(fault.Unavailable), ErrorMessage: "the job could not be recorded; start it again"})
}

func (m *Manager) forget(id string) {
	m.mu.Lock()
	delete(m.running, id)
	m.mu.Unlock()
}

// Cancel asks a job to stop: at once when this server runs it, within a
// renewal when another does. It returns the job as stored.
func (m *Manager) Cancel(ctx context.Context, id string) (store.Job, error) {
	j, err := m.cfg.Store.RequestCancel(ctx, id)
	if err != nil {
		return store.Job{}, err
	}
	m.mu.Lock()
	if r, ok := m.running[id]; ok && r.cancel != nil {
		r.cancel(errCancelled)
	}
	m.mu.Unlock()
	return j, nil
}

// execute waits for r's slot, runs the job to its end and records the
// end.
func (m *Manager) execute(ctx context.Context, r *run, req request, p prepared) {
	defer m.wg.Done()
	defer m.forget(r.job.ID)
	defer m.slots.giveUp(r.ticket)
	defer r.cancel(nil)
	log := m.cfg.Log.With(zap.String("job", r.job.ID), zap.String("kind", r.job.Kind), zap.String("principal", r.job.Principal))
	renewDone := make(chan struct{})
	// Renewed while queued too: the lease says the job is alive, and a
	// cancel reaches a queued job as it does a running one.
	go m.renew(ctx, r, renewDone)

	var result proto.Message
	err := m.slots.wait(ctx, r.ticket)
	if err == nil {
		log.Info("job started")
		r.phase.Store(int32(pv.JobPhase_JOB_PHASE_STARTING))
		switch req := req.(type) {
		case ExportRequest:
			result, err = m.export(ctx, r, req, p)
		case ImportRequest:
			result, err = m.importArchive(ctx, r, req, p)
		case EraseRequest:
			result, err = m.erase(ctx, r, req)
		}
	}
	r.cancel(nil)
	<-renewDone

	r.phase.Store(int32(pv.JobPhase_JOB_PHASE_DONE))
	end := store.JobEnd{State: store.JobSucceeded, At: time.Now()}
	if err == nil {
		if end.Result, err = proto.Marshal(result); err != nil {
			err = fmt.Errorf("encode result: %w", err)
		}
	}
	if err != nil {
		end.State, end.Result = store.JobFailed, nil
		end.ErrorCode, end.ErrorMessage = m.describe(ctx, r.job.Kind, err, log)
		if r.meta.GetValidateOnly() && r.job.Kind == store.JobImport {
			// A dry run applied nothing to leave behind.
			end.ErrorMessage = strings.TrimSuffix(end.ErrorMessage, importLeftBehind) + "; a validate-only import applies nothing"
		}
		if end.ErrorCode == int32(fault.Canceled) {
			end.State = store.JobCancelled
		}
	}
	if rr, ok := result.(*pv.ExportJobResult); ok && err == nil {
		md := r.meta
		md.RecordsDone = rr.GetSummary().GetGroups() + rr.GetSummary().GetMessages() + rr.GetSummary().GetConsentRecords() + 1
	}
	if ir, ok := result.(*pv.ImportJobResult); ok && err == nil {
		r.meta.RecordsDone = ir.GetCounts().GetRecords()
	}
	end.Progress = r.progress()
	if errors.Is(context.Cause(ctx), errLost) {
		// Lost: another replica holds the job, or takes it over once its
		// lease runs out (takeover.go). This runner writes nothing more:
		// not the end, not the backup's row.
		log.Warn("job lost: left to its lease and to the replica that takes it over", zap.Error(err))
		return
	}
	// The end is written even when the server is shutting down.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if r.job.Kind == store.JobExport && err != nil {
		// A backup whose export failed is no backup: its object was
		// aborted or deleted, and its row goes too, fenced by this
		// attempt: a row a later attempt holds is not this one's to drop.
		if derr := m.cfg.Store.AbandonBackup(fctx, p.backup.Owner, p.backup.ID, r.fence()); derr != nil && !errors.Is(derr, store.ErrNotFound) {
			log.Warn("failed backup's catalog row not deleted", zap.String("backup", p.backup.ID), zap.Error(derr))
		}
	}
	if ferr := m.cfg.Store.FinishJob(fctx, r.job.ID, r.job.Attempt, end); ferr != nil {
		log.Warn("job end not recorded", zap.Error(ferr))
		return
	}
	if m.cfg.Ended != nil {
		m.cfg.Ended(r.job.Kind, end.State, r.bytes.Load(), end.At.Sub(r.job.Created))
	}
	log.Info("job ended", zap.String("state", end.State), zap.String("error", end.ErrorMessage), zap.Uint64("bytes", r.bytes.Load()))
	if r.job.Kind == store.JobExport && m.cfg.Freshness.ExportBlocked != nil {
		var unexportable *backup.UnexportableError
		switch {
		case errors.As(err, &unexportable):
			m.cfg.Freshness.ExportBlocked(p.backup.Schedule, p.backup.Owner, true)
		case end.State == store.JobSucceeded:
			m.cfg.Freshness.ExportBlocked(p.backup.Schedule, p.backup.Owner, false)
		}
	}
	if end.State == store.JobSucceeded && p.backup.Schedule != "" && m.cfg.Freshness.BackupSucceeded != nil {
		m.cfg.Freshness.BackupSucceeded(p.backup.Schedule, p.backup.Owner, end.At)
	}
	if end.State == store.JobSucceeded && p.schedule != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err := m.Catalog.Prune(sctx, p.schedule, p.backup.Owner)
		if err != nil {
			log.Warn("retention", zap.String("schedule", p.schedule.Name), zap.String("owner", p.backup.Owner), zap.Error(err))
		}
		if m.cfg.Freshness.RetentionRan != nil {
			m.cfg.Freshness.RetentionRan(p.schedule.Name, time.Now(), err)
		}
	}
}

// describe turns a job's error into the code and message its operation
// shows: the cause of a cancellation, or the error's kind (fault.Of, the
// vocabulary RPCs are classified by too). Permanent failures (a damaged
// backup, a bad archive, a budget) say so; transient ones (store or
// storage unavailable) say to start again. Kinds that name the server's
// own trouble show a generic message (the server log has the cause), as
// RPCs do. The code is the kind: fault's kinds are google.rpc.Code's.
func (m *Manager) describe(ctx context.Context, kind string, err error, log *zap.Logger) (int32, string) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCancelled):
		return int32(fault.Canceled), ended(kind, "cancelled")
	case errors.Is(cause, errShutdown):
		return int32(fault.Unavailable), ended(kind, errShutdown.Error())
	case errors.Is(cause, errLost):
		return int32(fault.Aborted), ended(kind, errLost.Error())
	}
	var full *store.FullError
	k := fault.Of(err, fault.FileKind, store.UnavailableKind, storageKind)
	switch {
	case errors.As(err, &full):
		log.Error("job failed: store out of space", zap.Error(err))
		return int32(k), ended(kind, "the store ("+full.Engine+") is out of space")
	case errors.Is(err, ErrObjectExists):
		return int32(k), clip(err.Error())
	case errors.Is(err, ErrKeyUnavailable), errors.Is(err, keyring.ErrNoKEK):
		log.Error("job failed: key-encryption key unavailable", zap.Error(err))
		return int32(k), ended(kind, "the key-encryption key that wrapped the backup is not available to this server (see its log)")
	case errors.Is(err, ErrBackupDamaged), errors.Is(err, keyring.ErrUnwrap):
		log.Error("job failed: backup damaged", zap.Error(err))
		return int32(k), ended(kind, "the backup's object or key does not match the catalog; it cannot be read")
	case gcerrors.Code(err) == gcerrors.NotFound:
		// The source was deleted while it was read: starting again does
		// not help.
		log.Warn("job failed: object gone", zap.Error(err))
		if kind == store.JobImport {
			return int32(k), "the backup's object is gone from its bucket (deleted while it was read); the records applied so far stay"
		}
		return int32(k), ended(kind, "an object the export wrote is gone from its bucket")
	case k == fault.Exhausted && (gcerrors.Code(err) == gcerrors.ResourceExhausted || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)):
		log.Error("job failed: bucket out of space", zap.Error(err))
		return int32(k), ended(kind, "the bucket is out of space or over its quota")
	case k == fault.FailedPrecondition && gcerrors.Code(err) != gcerrors.Unknown:
		log.Warn("job failed: storage refused", zap.Error(err))
		return int32(k), ended(kind, "object storage refused the server: "+gcerrors.Code(err).String()+" (see the server log)")
	}
	switch k {
	case fault.Exhausted, fault.FailedPrecondition, fault.Invalid:
		// A budget, the record or the archive at fault, named by record:
		// safe to show, as the RPCs show it.
		return int32(k), ended(kind, clip(err.Error()))
	case fault.Unavailable, fault.Canceled, fault.DeadlineExceeded:
		// A context error that is not the job's own cancellation came
		// from storage's calls: storage failed, for the job.
		if store.Unavailable(err) {
			log.Warn("job failed: store unavailable", zap.Error(err))
			return int32(k), ended(kind, "the store is unavailable")
		}
		log.Warn("job failed: storage", zap.Error(err))
		return int32(k), ended(kind, "object storage refused or failed: "+gcerrors.Code(err).String())
	}
	log.Error("job failed", zap.Error(err))
	return int32(fault.Internal), ended(kind, "internal error")
}

// storageKind classifies object storage's errors, which carry gocloud's
// codes rather than a kind: an object that is gone (a backup deleted
// while it was read) or a bucket that refuses the server is the state's
// fault, FailedPrecondition; a full bucket or quota is Exhausted; only
// storage that cannot be reached, or fails, is Unavailable.
func storageKind(err error) (fault.Kind, bool) {
	switch gcerrors.Code(err) {
	case gcerrors.Unknown, gcerrors.OK:
		return 0, false
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.FailedPrecondition:
		return fault.FailedPrecondition, true
	case gcerrors.ResourceExhausted:
		return fault.Exhausted, true
	}
	return fault.Unavailable, true
}

// clip bounds a message at 512 bytes, cut on a character boundary.
func clip(s string) string { return fault.Clip(s, 512, "...") }

// renew writes r's progress and extends its lease every Renew until ctx
// ends, and cancels r when a cancel was asked or the job was ended
// elsewhere.
//
// A lease is not a lock: past two thirds of a lease without a renewal
// the runner stops (errLost), before another replica may take the job
// over. A watchdog timer enforces it, so a renewal that hangs in the
// store stops the runner as surely as one that fails; and each renewal's
// own deadline is that same instant. Every side effect after that is
// fenced by the attempt in the store anyway (CompleteBackup,
// AbandonBackup, FinishJob), and each attempt writes its own object key.
func (m *Manager) renew(ctx context.Context, r *run, done chan<- struct{}) {
	defer close(done)
	limit := m.cfg.Lease * 2 / 3
	stopBy := time.Now().Add(limit)
	watchdog := time.AfterFunc(limit, func() { r.cancel(errLost) })
	defer watchdog.Stop()
	tick := time.NewTicker(m.cfg.Renew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		rctx, cancelCall := context.WithDeadline(ctx, stopBy)
		cancel, err := m.cfg.Store.RenewJob(rctx, r.job.ID, r.job.Attempt, r.progress(), start.Add(m.cfg.Lease))
		cancelCall()
		var lost *store.FenceLostError
		switch {
		case errors.As(err, &lost):
			m.cfg.Log.Warn("job attempt stopped: its fence is lost", zap.String("job", r.job.ID), zap.Error(err))
			r.cancel(errLost)
			return
		case err != nil:
			// The lease outlasts a few missed renewals; the watchdog
			// stops the runner when it has none left.
			if ctx.Err() == nil {
				m.cfg.Log.Warn("renew job", zap.String("job", r.job.ID), zap.Error(err))
			}
		case cancel:
			r.cancel(errCancelled)
			return
		default:
			stopBy = start.Add(limit)
			watchdog.Reset(time.Until(stopBy))
		}
	}
}

// countingWriter counts and hashes what reaches the object, and holds it
// to the export's space (nil: none).
type countingWriter struct {
	w     io.Writer
	hash  hash.Hash
	n     *atomic.Uint64
	space *spaceGuard
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.space != nil {
		if err := c.space.wrote(int64(c.n.Load()) + int64(len(p))); err != nil {
			return 0, err
		}
	}
	n, err := c.w.Write(p)
	c.hash.Write(p[:n])
	c.n.Add(uint64(n))
	return n, err
}

func (m *Manager) export(ctx context.Context, r *run, req ExportRequest, p prepared) (proto.Message, error) {
	reservation := backup.ExportReservation(int64(m.cfg.Import.Reader.MaxRecordSize)) + blobBufferSize
	reserve := m.cfg.Pool.NewCall("export job", reservation)
	defer reserve.Close()
	if err := reserve.Charge(reservation); err != nil {
		return nil, err
	}
	// Each attempt writes its own object: a stale attempt (one that lost
	// its lease and does not know it yet) can neither overwrite nor, in
	// its cleanup, delete what a later attempt committed.
	dest := &pv.ObjectLocation{Bucket: p.backup.Bucket, Key: AttemptKey(p.backup.ObjectKey, r.job.Attempt)}
	space, err := m.Catalog.admitSpace(ctx, p.backup.Owner, p.backup.Bucket)
	if err != nil {
		return nil, err
	}
	// Cancelling wctx aborts the write: nothing is committed under the key
	// unless Close succeeds after every byte.
	wctx, abort := context.WithCancel(ctx)
	defer abort()
	w, err := p.bucket.NewWriter(wctx, dest.GetKey(), &blob.WriterOptions{
		ContentType: "application/octet-stream", BufferSize: blobBufferSize, MaxConcurrency: 1,
		// The check at start is not atomic: two exports racing for one key
		// are settled by the store (S3's If-None-Match, an exclusive
		// create on files), and the loser fails rather than replaces.
		IfNotExist: true,
	})
	if err != nil {
		return nil, fmt.Errorf("open object: %w", err)
	}
	r.phase.Store(int32(pv.JobPhase_JOB_PHASE_TRANSFERRING))
	out := &countingWriter{w: w, hash: sha256.New(), n: &r.bytes, space: space}
	exportedAt, counts, err := m.writeArchive(ctx, r, req, p, out)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		abort()
		_ = w.Close()
		return nil, err
	}
	r.phase.Store(int32(pv.JobPhase_JOB_PHASE_COMMITTING))
	if err := w.Close(); err != nil {
		if gcerrors.Code(err) == gcerrors.FailedPrecondition {
			return nil, fmt.Errorf("destination %s/%.64s, created while the export ran: %w", dest.GetBucket(), dest.GetKey(), ErrObjectExists)
		}
		return nil, fmt.Errorf("commit object: %w", err)
	}
	summary := &pv.ExportSummary{Groups: counts.Groups, Messages: counts.Messages, ConsentRecords: counts.Consent,
		ArchiveBytes: r.bytes.Load(), Sha256: out.hash.Sum(nil), ExportedAtNs: exportedAt,
		ExcludedRecords: counts.Excluded, RepairedRecords: counts.Repaired}
	result := &pv.ExportJobResult{Summary: summary, Archive: dest, Backup: p.backup.ID,
		Sidecar: &pv.ObjectLocation{Bucket: dest.GetBucket(), Key: dest.GetKey() + SidecarSuffix}}
	err = m.commit(ctx, p.bucket, result)
	if err == nil {
		err = m.cfg.Store.CompleteBackup(ctx, p.backup.Owner, p.backup.ID, r.fence(), store.BackupSummary{
			ObjectKey: dest.GetKey(), Groups: counts.Groups, Messages: counts.Messages, Consent: counts.Consent,
			Length: summary.ArchiveBytes, SHA256: summary.Sha256, ExportedAtNs: exportedAt, At: time.Now(), ChangeSeq: counts.ChangeSeq})
	}
	if err != nil {
		// Whatever this attempt committed goes: an export that did not
		// end well leaves no object. Only this attempt's keys: never
		// another attempt's.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = p.bucket.Delete(dctx, result.GetSidecar().GetKey())
		_ = p.bucket.Delete(dctx, dest.GetKey())
		return nil, err
	}
	if r.job.Attempt > 1 {
		// Earlier attempts' objects are no backup: the catalog names
		// this one. A stale attempt may have committed after the
		// takeover cleared them.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = m.Catalog.deleteAttempts(dctx, p.bucket, p.backup.ObjectKey, 1, r.job.Attempt-1)
	}
	// Tombstones at or below the owner's oldest backup serve no restore
	// (store.Tombstones). One export job runs per owner at a time, so no
	// backup being written can still need them.
	if _, err := m.cfg.Store.PruneTombstones(ctx, p.backup.Owner); err != nil {
		m.cfg.Log.Warn("tombstones not pruned", zap.Error(err))
	}
	return result, nil
}

// AttemptKey is the object key attempt writes a backup created at key
// to: the first attempt key itself, a later one key with ".attempt-N"
// before its suffix.
func AttemptKey(key string, attempt int) string {
	if attempt <= 1 {
		return key
	}
	return strings.TrimSuffix(key, ArchiveSuffix) + fmt.Sprintf(".attempt-%d", attempt) + ArchiveSuffix
}

// importCounts is an import's result as its job keeps it.
func importCounts(r backup.ImportResult) *pv.ImportCounts {
	counts := func(c backup.ElementCounts) *pv.ElementCounts {
		return &pv.ElementCounts{Inserted: c.Inserted, Updated: c.Updated, Unchanged: c.Unchanged}
	}
	return &pv.ImportCounts{
		Metadata: r.Metadata, Groups: counts(r.Groups), Messages: counts(r.Messages), Consent: counts(r.Consent),
		Records: r.Records, Skipped: r.Skipped, LegacyRecords: r.Legacy,
	}
}

// errSizeMismatch: the committed object is not what was written.
var errSizeMismatch = errors.New("the committed object's size differs from the bytes written")

// commit checks the committed object against the summary and writes the
// sidecar.
func (m *Manager) commit(ctx context.Context, bucket *blob.Bucket, result *pv.ExportJobResult) error {
	attrs, err := bucket.Attributes(ctx, result.GetArchive().GetKey())
	if err != nil {
		return fmt.Errorf("check object: %w", err)
	}
	if uint64(attrs.Size) != result.GetSummary().GetArchiveBytes() {
		return fmt.Errorf("%w: %d, wrote %d", errSizeMismatch, attrs.Size, result.GetSummary().GetArchiveBytes())
	}
	body, err := sidecarJSON(result)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := bucket.WriteAll(ctx, result.GetSidecar().GetKey(), body, &blob.WriterOptions{ContentType: "application/json", IfNotExist: true}); err != nil {
		return fmt.Errorf("write sidecar: %w", err)
	}
	return ctx.Err()
}

// sidecarJSON is the sidecar's content: the export's result as JSON.
func sidecarJSON(result *pv.ExportJobResult) ([]byte, error) {
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("encode sidecar: %w", err)
	}
	return append(b, '\n'), nil
}

// countingReader counts what is read from the object.
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

func (m *Manager) importArchive(ctx context.Context, r *run, req ImportRequest, p prepared) (proto.Message, error) {
	ahead := m.cfg.Pool.NewCall("import job read-ahead", m.cfg.Import.ReadAheadBytes)
	defer ahead.Close()
	opts := m.cfg.Import
	opts.ReadAhead = ahead
	opts.Progress = &r.records
	opts.ValidateOnly = req.ValidateOnly
	if req.Replace {
		return m.replace(ctx, r, req, p)
	}
	if p.backup.Base != "" {
		// An increment: its chain read as one snapshot (restore.go).
		c, closeChain, err := m.Catalog.readChain(ctx, p.sourceOwner, p.backup, &r.bytes)
		if err != nil {
			return nil, err
		}
		defer closeChain()
		r.phase.Store(int32(pv.JobPhase_JOB_PHASE_TRANSFERRING))
		res, err := backup.ImportFrom(ctx, m.cfg.Store, req.Owner, c, opts)
		if err != nil {
			return nil, err
		}
		return &pv.ImportJobResult{Counts: importCounts(res)}, nil
	}
	obj, err := p.bucket.NewReader(ctx, p.backup.ObjectKey, nil)
	if err != nil {
		return nil, fmt.Errorf("open object: %w", err)
	}
	defer obj.Close()
	readerBudget := m.cfg.Pool.NewCall("import job reader", backup.ReaderReservation(m.cfg.Import.Reader))
	defer readerBudget.Close()
	opts.Reader.Meter = readerBudget
	r.phase.Store(int32(pv.JobPhase_JOB_PHASE_TRANSFERRING))
	res, err := backup.Import(ctx, m.cfg.Store, req.Owner, p.key, &countingReader{r: obj, n: &r.bytes}, opts)
	if err != nil {
		return nil, err
	}
	return &pv.ImportJobResult{Counts: importCounts(res)}, nil
}

// Wait returns job id once it has ended, polling the store every poll
// (default 200 ms), or ctx's error.
func (m *Manager) Wait(ctx context.Context, id string, poll time.Duration) (store.Job, error) {
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		j, err := m.cfg.Store.GetJob(ctx, id)
		if err != nil || j.State != store.JobRunning {
			return j, err
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-t.C:
		}
	}
}
