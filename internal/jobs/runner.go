package jobs

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Runner runs jobs of every kind (kind.go): it takes or queues a slot
// for each (slots.go: fair across owners), stores it running with a
// lease, runs its body in a goroutine under an Attempt, renews the lease
// and writes the progress back while it runs, and records its end
// exactly once. Jobs whose server stopped are taken over (takeover.go).
type Runner struct {
	cfg   *Config
	kinds map[string]jobKind
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	slots *slots
	mu    sync.Mutex
	// running is the jobs started here and not ended: queued or running.
	running map[string]*run
	closed  bool
}

func newRunner(cfg *Config) *Runner {
	ctx, stop := context.WithCancel(context.Background())
	return &Runner{cfg: cfg, kinds: map[string]jobKind{}, ctx: ctx, stop: stop, running: map[string]*run{},
		slots: newSlots(cfg.MaxRunning, cfg.MaxRunningPerOwner, cfg.MaxQueuedPerOwner)}
}

// register makes k the kind of the jobs stored as name.
func (rn *Runner) register(name string, k jobKind) { rn.kinds[name] = k }

// run is one job this server is running.
type run struct {
	ticket  *ticket
	attempt *Attempt
	cancel  context.CancelCauseFunc
}

// Running is how many jobs this server runs now, not counting the queued.
func (rn *Runner) Running() int {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return len(rn.running) - rn.slots.queued()
}

// Queued is how many jobs wait for a slot.
func (rn *Runner) Queued() int { return rn.slots.queued() }

// msgServerStopped ends a job whose server stopped without ending it.
const msgServerStopped = "the server running this job stopped before it finished, on every attempt; an export commits nothing, an import keeps what it applied (imports are additive); start the job again"

// Run, every third of a lease period, takes over the running jobs whose
// server stopped while it has slots free, fails those that have used
// their attempts, and deletes the jobs that ended more than KeepFinished
// ago, until ctx is done: once at start, so a restarted server picks up
// its own dead jobs as soon as their leases end.
func (rn *Runner) Run(ctx context.Context) {
	tick := time.NewTicker(max(rn.cfg.Lease/3, 100*time.Millisecond))
	defer tick.Stop()
	for {
		ids, err := rn.cfg.Store.ExpireJobs(ctx, time.Now(), rn.cfg.MaxAttempts, int32(fault.Unavailable), msgServerStopped)
		if err != nil && ctx.Err() == nil {
			rn.cfg.Log.Warn("expire jobs", zap.Error(err))
		}
		for _, id := range ids {
			rn.cfg.Log.Warn("job failed: its server stopped", zap.String("job", id))
			rn.expired(ctx, id)
		}
		rn.takeOver(ctx)
		if n, err := rn.cfg.Store.DeleteFinishedJobs(ctx, time.Now().Add(-rn.cfg.KeepFinished), 1000); err != nil && ctx.Err() == nil {
			rn.cfg.Log.Warn("delete finished jobs", zap.Error(err))
		} else if n > 0 {
			rn.cfg.Log.Info("finished jobs deleted", zap.Int("count", n), zap.Duration("older_than", rn.cfg.KeepFinished))
		}
		select {
		case <-ctx.Done():
			return
		case <-rn.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// expired lets job id's kind clean up after it failed for good.
func (rn *Runner) expired(ctx context.Context, id string) {
	j, err := rn.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return
	}
	if k, ok := rn.kinds[j.Kind]; ok {
		k.expired(ctx, j)
	}
}

// Close cancels the jobs this server runs (they end failed, UNAVAILABLE)
// and waits for them to end, or for ctx.
func (rn *Runner) Close(ctx context.Context) {
	rn.mu.Lock()
	rn.closed = true
	for _, r := range rn.running {
		r.cancel(errShutdown)
	}
	rn.mu.Unlock()
	done := make(chan struct{})
	go func() { rn.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	rn.stop()
}

var (
	errShutdown  = errors.New("the server shut down before the job finished")
	errCancelled = errors.New("cancelled")
	errLost      = errors.New("the job was lost to another replica (its lease ran out)")
)

// requestIDPattern is what a request_id may be (AIP-155 suggests a UUID).
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// seen returns the owner's job of kind started with requestID, when there
// is one: a start that repeats a request id starts nothing (AIP-155).
func (rn *Runner) seen(ctx context.Context, owner, kind, requestID string) (store.Job, bool, error) {
	if requestID == "" {
		return store.Job{}, false, nil
	}
	if !requestIDPattern.MatchString(requestID) {
		return store.Job{}, false, invalid(fmt.Errorf("request_id %.64q: 1-64 letters, digits, '-' or '_'", requestID))
	}
	j, err := rn.cfg.Store.GetJobByRequest(ctx, owner, kind, requestID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Job{}, false, nil
	case err != nil:
		return store.Job{}, false, err
	}
	return j, true, nil
}

// start stores task t as a new job of principal's and runs it, now or
// once a slot frees.
func (rn *Runner) start(ctx context.Context, principal string, t task) (store.Job, error) {
	rn.mu.Lock()
	if rn.closed {
		rn.mu.Unlock()
		return store.Job{}, ErrShuttingDown
	}
	rn.mu.Unlock()
	// Held from here: a slot or a place in the owner's queue, given back
	// if the job is not stored.
	tk, err := rn.slots.take(t.owner())
	if err != nil {
		return store.Job{}, err
	}
	now := time.Now()
	id := NewID(now)
	r := &run{ticket: tk}
	rn.mu.Lock()
	rn.running[id] = r
	rn.mu.Unlock()
	abandon := func() {
		rn.forget(id)
		rn.slots.giveUp(tk)
	}

	spec, err := t.spec()
	if err != nil {
		abandon()
		return store.Job{}, fmt.Errorf("encode job: %w", err)
	}
	phase := pv.JobPhase_JOB_PHASE_QUEUED
	if granted(tk) {
		phase = pv.JobPhase_JOB_PHASE_STARTING
	}
	job := store.Job{ID: id, Kind: t.kind(), Owner: t.owner(), Principal: principal, State: store.JobRunning, RequestID: t.requestID(), Attempt: 1,
		Spec: spec, LeaseUntil: now.Add(rn.cfg.Lease), Created: now, Updated: now}
	md := &pv.JobProgress{Owner: t.owner(), Principal: principal, Phase: phase}
	t.describe(md, &job)
	r.attempt = newAttempt(job, md)
	job.Progress = r.attempt.progress()
	r.attempt.job = job
	if err := rn.cfg.Store.CreateJob(ctx, job); err != nil {
		abandon()
		if errors.Is(err, store.ErrRequestSeen) {
			// A start with the same request id won the race to the store.
			return rn.cfg.Store.GetJobByRequest(ctx, t.owner(), t.kind(), t.requestID())
		}
		return store.Job{}, err
	}
	if err := t.stored(ctx, job); err != nil {
		rn.endUnstarted(job, err)
		abandon()
		return store.Job{}, err
	}
	runCtx, cancel := context.WithCancelCause(rn.ctx)
	r.cancel = cancel
	rn.wg.Add(1)
	go rn.execute(runCtx, r, t)
	return job, nil
}

// endUnstarted fails a stored job that never ran.
func (rn *Runner) endUnstarted(j store.Job, cause error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(rn.ctx), 10*time.Second)
	defer cancel()
	rn.cfg.Log.Warn("job not started", zap.String("job", j.ID), zap.Error(cause))
	_ = rn.cfg.Store.FinishJob(fctx, j.ID, j.Attempt, store.JobEnd{State: store.JobFailed, At: time.Now(),
		ErrorCode: int32(fault.Unavailable), ErrorMessage: "the job could not be recorded; start it again"})
}

func (rn *Runner) forget(id string) {
	rn.mu.Lock()
	delete(rn.running, id)
	rn.mu.Unlock()
}

// Cancel asks a job to stop: at once when this server runs it, within a
// renewal when another does. It returns the job as stored.
func (rn *Runner) Cancel(ctx context.Context, id string) (store.Job, error) {
	j, err := rn.cfg.Store.RequestCancel(ctx, id)
	if err != nil {
		return store.Job{}, err
	}
	rn.mu.Lock()
	if r, ok := rn.running[id]; ok && r.cancel != nil {
		r.cancel(errCancelled)
	}
	rn.mu.Unlock()
	return j, nil
}

// execute waits for r's slot, runs task t to its end and records the
// end.
func (rn *Runner) execute(ctx context.Context, r *run, t task) {
	defer rn.wg.Done()
	a := r.attempt
	defer rn.forget(a.job.ID)
	defer rn.slots.giveUp(r.ticket)
	defer r.cancel(nil)
	log := rn.cfg.Log.With(zap.String("job", a.job.ID), zap.String("kind", a.job.Kind), zap.String("principal", a.job.Principal))
	renewDone := make(chan struct{})
	// Renewed while queued too: the lease says the job is alive, and a
	// cancel reaches a queued job as it does a running one.
	go rn.renew(ctx, r, renewDone)

	var result proto.Message
	err := rn.slots.wait(ctx, r.ticket)
	if err == nil {
		log.Info("job started")
		a.SetPhase(pv.JobPhase_JOB_PHASE_STARTING)
		result, err = t.run(ctx, a)
	}
	r.cancel(nil)
	<-renewDone

	a.SetPhase(pv.JobPhase_JOB_PHASE_DONE)
	end := store.JobEnd{State: store.JobSucceeded, At: time.Now()}
	if err == nil {
		if end.Result, err = proto.Marshal(result); err != nil {
			err = fmt.Errorf("encode result: %w", err)
		}
	}
	if err != nil {
		end.State, end.Result = store.JobFailed, nil
		f := rn.describe(ctx, a.job.Kind, a.validateOnly(), err, log)
		end.ErrorCode, end.ErrorMessage = int32(f.kind), f.msg
		// The body and the renewals have stopped: the progress is this
		// goroutine's alone from here.
		a.meta.ErrorReason = string(f.reason)
		if f.kind == fault.Canceled {
			end.State = store.JobCancelled
		}
	}
	end.Progress = a.progress()
	if errors.Is(context.Cause(ctx), errLost) {
		// Lost: another replica holds the job, or takes it over once its
		// lease runs out (takeover.go). This runner writes nothing more:
		// not the end, not the kind's own rows.
		log.Warn("job lost: left to its lease and to the replica that takes it over", zap.Error(err))
		return
	}
	// The end is written even when the server is shutting down.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err != nil {
		t.settle(fctx, a)
	}
	if ferr := rn.cfg.Store.FinishJob(fctx, a.job.ID, a.job.Attempt, end); ferr != nil {
		log.Warn("job end not recorded", zap.Error(ferr))
		return
	}
	if rn.cfg.Ended != nil {
		rn.cfg.Ended(a.job.Kind, end.State, a.bytes.Load(), end.At.Sub(a.job.Created))
	}
	log.Info("job ended", zap.String("state", end.State), zap.String("error", end.ErrorMessage), zap.Uint64("bytes", a.bytes.Load()))
	t.ended(ctx, a, end, err)
}

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
func (rn *Runner) renew(ctx context.Context, r *run, done chan<- struct{}) {
	defer close(done)
	a := r.attempt
	limit := rn.cfg.Lease * 2 / 3
	stopBy := time.Now().Add(limit)
	watchdog := time.AfterFunc(limit, func() { r.cancel(errLost) })
	defer watchdog.Stop()
	tick := time.NewTicker(rn.cfg.Renew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		rctx, cancelCall := context.WithDeadline(ctx, stopBy)
		cancel, err := rn.cfg.Store.RenewJob(rctx, a.job.ID, a.job.Attempt, a.progress(), start.Add(rn.cfg.Lease))
		cancelCall()
		var lost *store.FenceLostError
		switch {
		case errors.As(err, &lost):
			rn.cfg.Log.Warn("job attempt stopped: its fence is lost", zap.String("job", a.job.ID), zap.Error(err))
			r.cancel(errLost)
			return
		case err != nil:
			// The lease outlasts a few missed renewals; the watchdog
			// stops the runner when it has none left.
			if ctx.Err() == nil {
				rn.cfg.Log.Warn("renew job", zap.String("job", a.job.ID), zap.Error(err))
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

// Wait returns job id once it has ended, polling the store every poll
// (default 200 ms), or ctx's error.
func (rn *Runner) Wait(ctx context.Context, id string, poll time.Duration) (store.Job, error) {
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		j, err := rn.cfg.Store.GetJob(ctx, id)
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
