// Package jobs runs exports and imports on the server, to and from object
// storage (gocloud.dev/blob), as jobs kept in the store: started by
// BackupService, polled through google.longrunning.Operations, and
// scheduled by a cron policy.
//
// A job's life: Start checks the request, opens its key and bucket, stores
// the job running with a lease and runs it in a goroutine. While it runs,
// its progress is written back and its lease renewed every second; that
// write also reads whether a cancel was asked (possibly on another
// replica). A job ends exactly once (the store's FinishJob refuses a
// second end). A server that stops without ending its jobs leaves their
// leases to run out, and whichever server is running fails them then.
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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Errors the service tells apart.
var (
	// ErrInvalid: the request is malformed; the wrapping error says how.
	ErrInvalid = errors.New("invalid job request")
	// ErrObjectExists: an export would replace an object.
	ErrObjectExists = errors.New("the object exists; exports never replace an object")
	// ErrObjectMissing: an import's source object does not exist.
	ErrObjectMissing = errors.New("no such object")
	// ErrTooManyJobs: the server runs as many jobs as it may.
	ErrTooManyJobs = errors.New("the server is running as many jobs as it may; retry later")
	// ErrShuttingDown: the server is stopping and starts no job.
	ErrShuttingDown = errors.New("the server is shutting down")
)

// Config is what the manager runs jobs with.
type Config struct {
	Store   store.Store
	Keys    *KeyRing
	Buckets *Buckets
	Pool    *budget.Pool
	// ExportReservation is what one export holds (the ArchiveService's
	// figure); the blob writer's buffer is added to it.
	ExportReservation int64
	// Import is an import's limits; its Reader.Meter and ReadAhead are set
	// per job from Pool.
	Import            backup.ImportOptions
	ReaderReservation int64
	// MaxRunning bounds the jobs this server runs at once (default 4).
	MaxRunning int
	// Lease is how long a job stays running without its server renewing
	// it (default 30 s); Renew is how often it is renewed and progress
	// written (default 1 s), which is also how soon a cancel asked on
	// another replica is seen.
	Lease, Renew time.Duration
	Log          *zap.Logger
	// Ended, when set, is told of every job this server ran to its end:
	// kind, state, archive bytes moved and how long it ran (metrics).
	Ended func(kind, state string, bytes uint64, took time.Duration)
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
	mu      sync.Mutex
	running map[string]*run
	closed  bool
}

// New returns a manager; Run starts its lease reaper.
func New(cfg Config) *Manager {
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 4
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
	ctx, stop := context.WithCancel(context.Background())
	return &Manager{cfg: cfg, ctx: ctx, stop: stop, running: map[string]*run{}}
}

// Running is how many jobs this server runs now.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running)
}

// Buckets are the buckets jobs may use.
func (m *Manager) Buckets() *Buckets { return m.cfg.Buckets }

// msgServerStopped ends a job whose server stopped without ending it.
const msgServerStopped = "the server running this job stopped before it finished; nothing was committed; start the job again"

// Run fails, every lease period, the running jobs whose server stopped,
// until ctx is done: once at start, so a restarted server clears its own
// dead jobs as soon as their leases end.
func (m *Manager) Run(ctx context.Context) {
	tick := time.NewTicker(max(m.cfg.Lease/3, 100*time.Millisecond))
	defer tick.Stop()
	for {
		ids, err := m.cfg.Store.ExpireJobs(ctx, time.Now(), msgServerStopped)
		if err != nil && ctx.Err() == nil {
			m.cfg.Log.Warn("expire jobs", zap.Error(err))
		}
		for _, id := range ids {
			m.cfg.Log.Warn("job failed: its server stopped", zap.String("job", id))
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
	errShutdown  = errors.New("the server shut down before the job finished; nothing was committed; start it again")
	errCancelled = errors.New("cancelled")
	errLost      = errors.New("the job was ended elsewhere (its lease ran out)")
)

// run is one job this server is running.
type run struct {
	job     store.Job
	meta    *cb.JobMetadata
	cancel  context.CancelCauseFunc
	bytes   atomic.Uint64
	records atomic.Uint64
	phase   atomic.Int32
}

func (r *run) progress() []byte {
	md := proto.Clone(r.meta).(*cb.JobMetadata)
	md.BytesDone = r.bytes.Load()
	if md.RecordsDone == 0 {
		md.RecordsDone = r.records.Load() // the final count, once known, stays
	}
	md.Phase = cb.JobPhase(r.phase.Load())
	b, _ := proto.Marshal(md)
	return b
}

// NewID returns a job id that sorts by creation time: 16 hex digits of
// the time in nanoseconds, then 16 random ones.
func NewID(now time.Time) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%016x%s", uint64(now.UnixNano()), hex.EncodeToString(b[:]))
}

func invalid(err error) error { return fmt.Errorf("%w: %w", ErrInvalid, err) }

func checkLocation(field string, loc *cb.ObjectLocation) error {
	if loc == nil {
		return invalid(fmt.Errorf("%s: name a bucket and key", field))
	}
	if loc.GetBucket() == "" {
		return invalid(fmt.Errorf("%s.bucket: empty", field))
	}
	if err := CheckObjectKey(loc.GetKey()); err != nil {
		return invalid(fmt.Errorf("%s.%w", field, err))
	}
	return nil
}

// prepared is what Start opened for a job before storing it.
type prepared struct {
	key       []byte
	bucket    *blob.Bucket
	total     uint64
	succeeded func(context.Context)
}

func (m *Manager) prepare(ctx context.Context, owner, keyRef string, loc *cb.ObjectLocation, field string) (prepared, error) {
	if err := records.CheckOwner(owner); err != nil {
		return prepared{}, invalid(err)
	}
	if err := CheckKeyRef(keyRef); err != nil {
		return prepared{}, invalid(err)
	}
	if err := checkLocation(field, loc); err != nil {
		return prepared{}, err
	}
	key, err := m.cfg.Keys.Key(ctx, keyRef)
	if err != nil {
		if errors.Is(err, ErrUnknownKey) {
			return prepared{}, invalid(err)
		}
		return prepared{}, err
	}
	bucket, err := m.cfg.Buckets.Open(ctx, loc.GetBucket())
	if err != nil {
		if errors.Is(err, ErrUnknownBucket) {
			return prepared{}, invalid(fmt.Errorf("%s.bucket: %w", field, err))
		}
		return prepared{}, err
	}
	return prepared{key: key, bucket: bucket}, nil
}

// StartExport starts an export job for principal.
func (m *Manager) StartExport(ctx context.Context, principal string, req *cb.StartExportRequest) (store.Job, error) {
	return m.startExport(ctx, principal, req, nil)
}

// startExport is StartExport running succeeded, when set, in the job's
// goroutine once the job has ended well (a schedule's retention).
func (m *Manager) startExport(ctx context.Context, principal string, req *cb.StartExportRequest, succeeded func(context.Context)) (store.Job, error) {
	p, err := m.prepare(ctx, req.GetOwner(), req.GetKeyRef(), req.GetDestination(), "destination")
	if err != nil {
		return store.Job{}, err
	}
	if _, err := backup.Resolve(req.GetOptions()); err != nil {
		return store.Job{}, invalid(err)
	}
	dest := req.GetDestination()
	for _, k := range []string{dest.GetKey(), dest.GetKey() + SidecarSuffix} {
		exists, err := p.bucket.Exists(ctx, k)
		if err != nil {
			return store.Job{}, fmt.Errorf("destination: %w", err)
		}
		if exists {
			return store.Job{}, fmt.Errorf("destination %s/%.64s: %w", dest.GetBucket(), k, ErrObjectExists)
		}
	}
	p.succeeded = succeeded
	return m.start(ctx, store.JobExport, principal, req, p)
}

// StartImport starts an import job for principal.
func (m *Manager) StartImport(ctx context.Context, principal string, req *cb.StartImportRequest) (store.Job, error) {
	p, err := m.prepare(ctx, req.GetOwner(), req.GetKeyRef(), req.GetSource(), "source")
	if err != nil {
		return store.Job{}, err
	}
	attrs, err := p.bucket.Attributes(ctx, req.GetSource().GetKey())
	if gcerrors.Code(err) == gcerrors.NotFound {
		return store.Job{}, fmt.Errorf("source %s/%.64s: %w", req.GetSource().GetBucket(), req.GetSource().GetKey(), ErrObjectMissing)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("source: %w", err)
	}
	p.total = uint64(max(attrs.Size, 0))
	return m.start(ctx, store.JobImport, principal, req, p)
}

type startRequest interface {
	proto.Message
	GetOwner() string
}

func (m *Manager) start(ctx context.Context, kind, principal string, req startRequest, p prepared) (store.Job, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return store.Job{}, ErrShuttingDown
	}
	if len(m.running) >= m.cfg.MaxRunning {
		m.mu.Unlock()
		return store.Job{}, fmt.Errorf("%d jobs: %w", m.cfg.MaxRunning, ErrTooManyJobs)
	}
	// Held from here: a place among the running, given back if the job is
	// not stored.
	now := time.Now()
	id := NewID(now)
	r := &run{}
	m.running[id] = r
	m.mu.Unlock()

	spec, err := proto.Marshal(req)
	if err != nil {
		m.forget(id)
		return store.Job{}, fmt.Errorf("encode job: %w", err)
	}
	md := &cb.JobMetadata{Owner: req.GetOwner(), Principal: principal, Phase: cb.JobPhase_JOB_PHASE_STARTING, BytesTotal: p.total}
	switch r := req.(type) {
	case *cb.StartExportRequest:
		md.Kind, md.Object = cb.JobKind_JOB_KIND_EXPORT, r.GetDestination()
	case *cb.StartImportRequest:
		md.Kind, md.Object = cb.JobKind_JOB_KIND_IMPORT, r.GetSource()
	}
	r.meta = md
	r.phase.Store(int32(md.Phase))
	job := store.Job{ID: id, Kind: kind, Owner: req.GetOwner(), Principal: principal, State: store.JobRunning,
		Spec: spec, Progress: r.progress(), LeaseUntil: now.Add(m.cfg.Lease), Created: now, Updated: now}
	if err := m.cfg.Store.CreateJob(ctx, job); err != nil {
		m.forget(id)
		return store.Job{}, err
	}
	r.job = job
	runCtx, cancel := context.WithCancelCause(m.ctx)
	r.cancel = cancel
	m.wg.Add(1)
	go m.execute(runCtx, r, req, p)
	return job, nil
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

// execute runs one job to its end and records the end.
func (m *Manager) execute(ctx context.Context, r *run, req proto.Message, p prepared) {
	defer m.wg.Done()
	defer m.forget(r.job.ID)
	defer r.cancel(nil)
	log := m.cfg.Log.With(zap.String("job", r.job.ID), zap.String("kind", r.job.Kind), zap.String("principal", r.job.Principal))
	log.Info("job started")
	renewDone := make(chan struct{})
	go m.renew(ctx, r, renewDone)

	var result proto.Message
	var err error
	switch req := req.(type) {
	case *cb.StartExportRequest:
		result, err = m.export(ctx, r, req, p)
	case *cb.StartImportRequest:
		result, err = m.importArchive(ctx, r, req, p)
	}
	r.cancel(nil)
	<-renewDone

	r.phase.Store(int32(cb.JobPhase_JOB_PHASE_DONE))
	end := store.JobEnd{State: store.JobSucceeded, At: time.Now()}
	if err == nil {
		if end.Result, err = proto.Marshal(result); err != nil {
			err = fmt.Errorf("encode result: %w", err)
		}
	}
	if err != nil {
		end.State, end.Result = store.JobFailed, nil
		end.ErrorCode, end.ErrorMessage = m.describe(ctx, err, log)
		if end.ErrorCode == int32(codes.Canceled) {
			end.State = store.JobCancelled
		}
	}
	if rr, ok := result.(*cb.ExportJobResult); ok && err == nil {
		md := r.meta
		md.RecordsDone = rr.GetSummary().GetGroups() + rr.GetSummary().GetMessages() + rr.GetSummary().GetConsentRecords() + 1
	}
	if ir, ok := result.(*cb.ImportJobResult); ok && err == nil {
		r.meta.RecordsDone = ir.GetCounts().GetRecords()
	}
	end.Progress = r.progress()
	// The end is written even when the server is shutting down.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := m.cfg.Store.FinishJob(fctx, r.job.ID, end); ferr != nil {
		log.Warn("job end not recorded", zap.Error(ferr))
		return
	}
	if m.cfg.Ended != nil {
		m.cfg.Ended(r.job.Kind, end.State, r.bytes.Load(), end.At.Sub(r.job.Created))
	}
	log.Info("job ended", zap.String("state", end.State), zap.String("error", end.ErrorMessage), zap.Uint64("bytes", r.bytes.Load()))
	if end.State == store.JobSucceeded && p.succeeded != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		p.succeeded(sctx)
	}
}

// describe turns a job's error into the code and message its operation
// shows: the cause of a cancellation, or the error's kind. Unforeseen
// errors show a generic message (the server log has the cause), as RPCs do.
func (m *Manager) describe(ctx context.Context, err error, log *zap.Logger) (int32, string) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCancelled):
		return int32(codes.Canceled), "cancelled; nothing was committed"
	case errors.Is(cause, errShutdown):
		return int32(codes.Unavailable), errShutdown.Error()
	case errors.Is(cause, errLost):
		return int32(codes.Aborted), errLost.Error()
	}
	var (
		ue *backup.UnexportableError
		be *budget.ExceededError
	)
	switch {
	case errors.Is(err, ErrObjectExists):
		return int32(codes.AlreadyExists), clip(err.Error())
	case errors.As(err, &be):
		return int32(codes.ResourceExhausted), clip(err.Error())
	case errors.As(err, &ue), errors.Is(err, backup.ErrMissingGroup):
		return int32(codes.FailedPrecondition), clip(err.Error())
	case isArchiveProblem(err):
		// The archive's own fault, named by record: safe to show, as
		// ArchiveService.Import shows it.
		return int32(codes.InvalidArgument), clip(err.Error())
	case store.Unavailable(err):
		log.Warn("job failed: store unavailable", zap.Error(err))
		return int32(codes.Unavailable), "the store is unavailable; start the job again"
	case gcerrors.Code(err) != gcerrors.Unknown && gcerrors.Code(err) != gcerrors.OK:
		log.Warn("job failed: storage", zap.Error(err))
		return int32(codes.Unavailable), "object storage refused or failed: " + gcerrors.Code(err).String()
	}
	log.Error("job failed", zap.Error(err))
	return int32(codes.Internal), "internal error"
}

func isArchiveProblem(err error) bool {
	_, ok := backup.ArchiveProblem(err)
	return ok
}

func clip(s string) string {
	if len(s) > 512 {
		return s[:512] + "..."
	}
	return s
}

// renew writes r's progress and extends its lease every Renew until ctx
// ends, and cancels r when a cancel was asked or the job was ended
// elsewhere.
func (m *Manager) renew(ctx context.Context, r *run, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(m.cfg.Renew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cancel, err := m.cfg.Store.RenewJob(ctx, r.job.ID, r.progress(), time.Now().Add(m.cfg.Lease))
		switch {
		case errors.Is(err, store.ErrFailedPrecondition):
			r.cancel(errLost)
			return
		case err != nil:
			// The lease outlasts a few missed renewals.
			if ctx.Err() == nil {
				m.cfg.Log.Warn("renew job", zap.String("job", r.job.ID), zap.Error(err))
			}
		case cancel:
			r.cancel(errCancelled)
			return
		}
	}
}

// countingWriter counts and hashes what reaches the object.
type countingWriter struct {
	w    io.Writer
	hash hash.Hash
	n    *atomic.Uint64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.hash.Write(p[:n])
	c.n.Add(uint64(n))
	return n, err
}

func (m *Manager) export(ctx context.Context, r *run, req *cb.StartExportRequest, p prepared) (proto.Message, error) {
	reserve := m.cfg.Pool.NewCall("export job", m.cfg.ExportReservation+blobBufferSize)
	defer reserve.Close()
	if err := reserve.Charge(m.cfg.ExportReservation + blobBufferSize); err != nil {
		return nil, err
	}
	dest := req.GetDestination()
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
	r.phase.Store(int32(cb.JobPhase_JOB_PHASE_TRANSFERRING))
	out := &countingWriter{w: w, hash: sha256.New(), n: &r.bytes}
	exportedAt := time.Now().UnixNano()
	counts, err := backup.ExportWith(ctx, m.cfg.Store, req.GetOwner(), p.key, req.GetOptions(), exportedAt, out, &r.records)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		abort()
		_ = w.Close()
		return nil, err
	}
	r.phase.Store(int32(cb.JobPhase_JOB_PHASE_COMMITTING))
	if err := w.Close(); err != nil {
		if gcerrors.Code(err) == gcerrors.FailedPrecondition {
			return nil, fmt.Errorf("destination %s/%.64s, created while the export ran: %w", dest.GetBucket(), dest.GetKey(), ErrObjectExists)
		}
		return nil, fmt.Errorf("commit object: %w", err)
	}
	summary := &cb.ExportSummary{Groups: counts.Groups, Messages: counts.Messages, ConsentRecords: counts.Consent,
		ArchiveBytes: r.bytes.Load(), Sha256: out.hash.Sum(nil), ExportedAtNs: exportedAt}
	result := &cb.ExportJobResult{Summary: summary, Archive: dest,
		Sidecar: &cb.ObjectLocation{Bucket: dest.GetBucket(), Key: dest.GetKey() + SidecarSuffix}}
	if err := m.commit(ctx, p.bucket, result); err != nil {
		// Whatever was committed goes: an export that did not end well
		// leaves no object.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = p.bucket.Delete(dctx, result.GetSidecar().GetKey())
		_ = p.bucket.Delete(dctx, dest.GetKey())
		return nil, err
	}
	return result, nil
}

// errSizeMismatch: the committed object is not what was written.
var errSizeMismatch = errors.New("the committed object's size differs from the bytes written")

// commit checks the committed object against the summary and writes the
// sidecar.
func (m *Manager) commit(ctx context.Context, bucket *blob.Bucket, result *cb.ExportJobResult) error {
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
func sidecarJSON(result *cb.ExportJobResult) ([]byte, error) {
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

func (m *Manager) importArchive(ctx context.Context, r *run, req *cb.StartImportRequest, p prepared) (proto.Message, error) {
	obj, err := p.bucket.NewReader(ctx, req.GetSource().GetKey(), nil)
	if err != nil {
		return nil, fmt.Errorf("open object: %w", err)
	}
	defer obj.Close()
	readerBudget := m.cfg.Pool.NewCall("import job reader", m.cfg.ReaderReservation)
	defer readerBudget.Close()
	ahead := m.cfg.Pool.NewCall("import job read-ahead", m.cfg.Import.ReadAheadBytes)
	defer ahead.Close()
	opts := m.cfg.Import
	opts.Reader.Meter = readerBudget
	opts.ReadAhead = ahead
	opts.Progress = &r.records
	r.phase.Store(int32(cb.JobPhase_JOB_PHASE_TRANSFERRING))
	res, err := backup.ImportWith(ctx, m.cfg.Store, req.GetOwner(), p.key, &countingReader{r: obj, n: &r.bytes}, opts)
	if err != nil {
		return nil, err
	}
	return &cb.ImportJobResult{Counts: res.Response()}, nil
}

// timestamp is t for a JobMetadata field; nil for the zero time.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
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
