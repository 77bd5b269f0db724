package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Jobs outlive the replica that started them: a job whose lease ran out
// (its server stopped, or lost the store for longer than a lease) is
// claimed by a replica with a slot free, which runs it again as the
// job's next attempt. The claim raises the job's attempt in the store,
// and the store takes renewals and the end only from the attempt that
// holds the job, so the runner that lost it stops at its next renewal
// and cannot end it; a runner that cannot renew stops by itself before
// its lease runs out (renew), so two attempts overlap only by as much
// as the replicas' clocks disagree, less than a third of a lease.
//
// An export runs again from the beginning into the same catalog row,
// sealed with the same data key under a fresh random base nonce
// (archive.Writer), as any two archives under one key are, but to an
// object key of its own (AttemptKey): the row names the key of the
// attempt that completed it, and the store completes or abandons the row
// only for the attempt that holds the job (store.Fence), so an attempt
// that paused past its lease can neither commit nor delete what its
// successor wrote. An
// import runs again whole: imports are additive and idempotent (ARCH
// import rules), so what the dead attempt applied is met again as
// unchanged.

// takeOver claims jobs whose server stopped, one at a time while this
// server has a slot free, and runs each again.
func (rn *Runner) takeOver(ctx context.Context) {
	for rn.hasFreeSlot() {
		now := time.Now()
		j, err := rn.cfg.Store.ClaimJob(ctx, now, now.Add(rn.cfg.Lease), rn.cfg.MaxAttempts)
		if errors.Is(err, store.ErrNotFound) {
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				rn.cfg.Log.Warn("claim job", zap.Error(err))
			}
			return
		}
		rn.resume(ctx, j)
	}
}

// hasFreeSlot: this server runs fewer jobs than it may, and none waits.
func (rn *Runner) hasFreeSlot() bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return !rn.closed && len(rn.running) < rn.cfg.MaxRunning
}

// resume runs claimed job j again, or ends it failed when it cannot run
// (its backup or key is gone, its spec unreadable).
func (rn *Runner) resume(ctx context.Context, j store.Job) {
	log := rn.cfg.Log.With(zap.String("job", j.ID), zap.String("kind", j.Kind), zap.Int("attempt", j.Attempt))
	md, t, err := rn.prepareAgain(ctx, j)
	var tk *ticket
	if err == nil {
		tk, err = rn.slots.take(j.Owner)
	}
	if err != nil {
		rn.endClaimed(ctx, j, err, log)
		return
	}
	md.Phase = pv.JobPhase_JOB_PHASE_QUEUED
	if granted(tk) {
		md.Phase = pv.JobPhase_JOB_PHASE_STARTING
	}
	md.BytesDone, md.RecordsDone = 0, 0
	r := &run{ticket: tk, attempt: newAttempt(j, md)}
	runCtx, cancel := context.WithCancelCause(rn.ctx)
	r.cancel = cancel
	rn.mu.Lock()
	if rn.closed {
		// Shutting down: the claim's lease runs out again, and another
		// replica takes the job.
		rn.mu.Unlock()
		cancel(errShutdown)
		rn.slots.giveUp(tk)
		return
	}
	rn.running[j.ID] = r
	rn.wg.Add(1)
	rn.mu.Unlock()
	log.Warn("job taken over: its server stopped; running it again")
	if rn.cfg.TakenOver != nil {
		rn.cfg.TakenOver(j.Kind)
	}
	go rn.execute(runCtx, r, t)
}

// endClaimed fails a claimed job that cannot run again, and lets its
// kind clean up as after any job that failed for good.
func (rn *Runner) endClaimed(ctx context.Context, j store.Job, cause error, log *zap.Logger) {
	md, perr := Progress(j)
	f := rn.describe(ctx, j.Kind, md.GetValidateOnly(), cause, log)
	progress := j.Progress
	if perr == nil {
		md.ErrorReason = string(f.reason)
		if b, err := proto.Marshal(md); err == nil {
			progress = b
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	end := store.JobEnd{State: store.JobFailed, Progress: progress, ErrorCode: int32(f.kind), ErrorMessage: f.msg, At: time.Now()}
	if err := rn.cfg.Store.FinishJob(fctx, j.ID, j.Attempt, end); err != nil {
		log.Warn("job end not recorded", zap.Error(err))
		return
	}
	log.Warn("taken-over job could not run again", zap.Error(cause))
	if k, ok := rn.kinds[j.Kind]; ok {
		k.expired(fctx, j)
	}
}

// prepareAgain reads what claimed job j needs to run again, through its
// kind.
func (rn *Runner) prepareAgain(ctx context.Context, j store.Job) (*pv.JobProgress, task, error) {
	md, err := Progress(j)
	if err != nil {
		return nil, nil, err
	}
	k, ok := rn.kinds[j.Kind]
	if !ok {
		return nil, nil, fmt.Errorf("job %s: kind %q: %w", j.ID, j.Kind, fault.New(fault.Internal, "unknown job kind"))
	}
	t, err := k.again(ctx, j)
	if err != nil {
		return nil, nil, err
	}
	return md, t, nil
}
