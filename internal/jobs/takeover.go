package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	"github.com/contentbackup/contentbackup/internal/backup"
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
func (m *Manager) takeOver(ctx context.Context) {
	for m.hasFreeSlot() {
		now := time.Now()
		j, err := m.cfg.Store.ClaimJob(ctx, now, now.Add(m.cfg.Lease), m.cfg.MaxAttempts)
		if errors.Is(err, store.ErrNotFound) {
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				m.cfg.Log.Warn("claim job", zap.Error(err))
			}
			return
		}
		m.resume(ctx, j)
	}
}

// hasFreeSlot: this server runs fewer jobs than it may, and none waits.
func (m *Manager) hasFreeSlot() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.closed && len(m.running) < m.cfg.MaxRunning
}

// resume runs claimed job j again, or ends it failed when it cannot run
// (its backup or key is gone, its spec unreadable).
func (m *Manager) resume(ctx context.Context, j store.Job) {
	log := m.cfg.Log.With(zap.String("job", j.ID), zap.String("kind", j.Kind), zap.Int("attempt", j.Attempt))
	md, req, p, err := m.prepareAgain(ctx, j)
	var tk *ticket
	if err == nil {
		tk, err = m.slots.take(j.Owner)
	}
	if err != nil {
		m.endClaimed(ctx, j, err, log)
		return
	}
	md.Phase = pv.JobPhase_JOB_PHASE_QUEUED
	if granted(tk) {
		md.Phase = pv.JobPhase_JOB_PHASE_STARTING
	}
	md.BytesDone, md.RecordsDone = 0, 0
	r := &run{ticket: tk, job: j, meta: md}
	r.phase.Store(int32(md.Phase))
	runCtx, cancel := context.WithCancelCause(m.ctx)
	r.cancel = cancel
	m.mu.Lock()
	if m.closed {
		// Shutting down: the claim's lease runs out again, and another
		// replica takes the job.
		m.mu.Unlock()
		cancel(errShutdown)
		m.slots.giveUp(tk)
		return
	}
	m.running[j.ID] = r
	m.wg.Add(1)
	m.mu.Unlock()
	log.Warn("job taken over: its server stopped; running it again")
	if m.cfg.TakenOver != nil {
		m.cfg.TakenOver(j.Kind)
	}
	go m.execute(runCtx, r, req, p)
}

// endClaimed fails a claimed job that cannot run again. An export's
// WRITING catalog row goes with it, as a failed export's does.
func (m *Manager) endClaimed(ctx context.Context, j store.Job, cause error, log *zap.Logger) {
	code, msg := m.describe(ctx, j.Kind, cause, log)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	end := store.JobEnd{State: store.JobFailed, Progress: j.Progress, ErrorCode: code, ErrorMessage: msg, At: time.Now()}
	if err := m.cfg.Store.FinishJob(fctx, j.ID, j.Attempt, end); err != nil {
		log.Warn("job end not recorded", zap.Error(err))
		return
	}
	log.Warn("taken-over job could not run again", zap.Error(cause))
	m.forgetDeadBackup(fctx, j.ID)
}

// prepareAgain reads what claimed job j needs to run again: its request
// from its spec, and its backup, key and bucket as a start finds them.
func (m *Manager) prepareAgain(ctx context.Context, j store.Job) (*pv.JobProgress, request, prepared, error) {
	md, err := Progress(j)
	if err != nil {
		return nil, nil, prepared{}, err
	}
	switch j.Kind {
	case store.JobExport:
		spec := &pv.ExportSpec{}
		if err := proto.Unmarshal(j.Spec, spec); err != nil {
			return nil, nil, prepared{}, fmt.Errorf("job %s: spec: %w", j.ID, err)
		}
		req := ExportRequest{Owner: j.Owner, Bucket: spec.GetBucket(), Label: spec.GetLabel(), Options: spec.GetOptions(),
			Nonconforming: nonconformingOf(spec.GetNonconforming()), RequestID: spec.GetRequestId(), Since: spec.GetSinceBackup(), From: spec.GetFromBackup()}
		p, err := m.exportAgain(ctx, j, md.GetBackup())
		return md, req, p, err
	case store.JobImport:
		spec := &pv.ImportSpec{}
		if err := proto.Unmarshal(j.Spec, spec); err != nil {
			return nil, nil, prepared{}, fmt.Errorf("job %s: spec: %w", j.ID, err)
		}
		req := ImportRequest{Owner: j.Owner, SourceOwner: spec.GetSourceOwner(), Backup: spec.GetBackup(), RequestID: spec.GetRequestId(),
			ValidateOnly: spec.GetValidateOnly(), Replace: spec.GetMode() == pv.ImportMode_IMPORT_MODE_REPLACE}
		source := req.SourceOwner
		if source == "" {
			source = req.Owner
		}
		b, key, err := m.Catalog.openBackup(ctx, source, req.Backup)
		if err != nil {
			return nil, nil, prepared{}, err
		}
		bucket, err := m.cfg.Buckets.Open(ctx, b.Bucket)
		if err != nil {
			return nil, nil, prepared{}, fmt.Errorf("backup %s: %w", b.ID, err)
		}
		chain, err := m.Catalog.chainOf(ctx, source, b)
		if err != nil {
			return nil, nil, prepared{}, err
		}
		return md, req, prepared{key: key, bucket: bucket, backup: b, total: chainLength(chain), sourceOwner: source}, nil
	case store.JobErase, store.JobEraseDryRun:
		spec := &pv.EraseSpec{}
		if err := proto.Unmarshal(j.Spec, spec); err != nil {
			return nil, nil, prepared{}, fmt.Errorf("job %s: spec: %w", j.ID, err)
		}
		return md, EraseRequest{Owner: j.Owner, DryRun: spec.GetDryRun(), RequestID: spec.GetRequestId()}, prepared{}, nil
	}
	return nil, nil, prepared{}, fmt.Errorf("job %s: kind %q: %w", j.ID, j.Kind, fault.New(fault.Internal, "unknown job kind"))
}

// exportAgain prepares export job j's backup row for another attempt.
// Whatever earlier attempts committed (one may have died between its
// commit and the catalog's) is no backup: it goes.
func (m *Manager) exportAgain(ctx context.Context, j store.Job, backupID string) (prepared, error) {
	b, err := m.cfg.Store.GetBackup(ctx, j.Owner, backupID)
	if err != nil {
		return prepared{}, fmt.Errorf("job %s: backup %s: %w", j.ID, backupID, err)
	}
	if b.State != store.BackupWriting || b.JobID != j.ID {
		return prepared{}, fmt.Errorf("job %s: backup %s is no longer this job's to write: %w", j.ID, b.ID, ErrBackupDamaged)
	}
	key, err := m.Keys.unwrap(ctx, b)
	if err != nil {
		return prepared{}, err
	}
	bucket, err := m.cfg.Buckets.Open(ctx, b.Bucket)
	if err != nil {
		return prepared{}, fmt.Errorf("backup %s: %w", b.ID, err)
	}
	if _, err := m.Catalog.deleteAttempts(ctx, bucket, b.ObjectKey, 1, j.Attempt-1); err != nil {
		return prepared{}, fmt.Errorf("backup %s: clear the earlier attempts' objects: %w", b.ID, err)
	}
	p := prepared{key: key, bucket: bucket, backup: b}
	if b.Base != "" {
		base, err := m.cfg.Store.GetBackup(ctx, j.Owner, b.Base)
		if err != nil {
			return prepared{}, fmt.Errorf("backup %s: its base %s: %w", b.ID, b.Base, err)
		}
		p.changedAfter = &base.Summary.ChangeSeq
	}
	return p, nil
}

// nonconformingOf reads a spec's export rule back.
func nonconformingOf(n pv.NonconformingRecords) backup.Nonconforming {
	for rule, row := range nonconformingRows {
		if row == n {
			return rule
		}
	}
	return backup.FailNonconforming
}
