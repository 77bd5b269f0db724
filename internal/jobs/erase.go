package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"google.golang.org/protobuf/proto"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Erasure removes one owner everywhere, in an order that makes each step
// safe to run again after a crash:
//
//  1. The owner's key is destroyed (its row, and every wrapped data key
//     in the owner's catalog rows, in one transaction). From here no
//     backup of the owner opens anywhere: an object copied to another
//     bucket, kept as an old version or downloaded, and a catalog row
//     read from a database dump, hold data keys sealed by a key that no
//     longer exists (docs/erasure.md says what this cannot reach).
//  2. Each catalog backup's objects (archive, sidecar, attempts) are
//     deleted, newest first so an increment goes before its base, then
//     its row.
//  3. Objects left directly under the owner's directories in every
//     bucket (an attempt a crash left) are deleted.
//  4. Every row of the owner goes from every owner table, and every job
//     of the owner but this one, which stays as the audit record: who
//     asked, when, and what was removed (counts only).
//
// An erasure is a job: taken over and run again when its server stops,
// each step finding less to do.

// EraseRequest is what an erasure job is asked to do.
type EraseRequest struct {
	Owner string
	// DryRun reports what would be erased and erases nothing.
	DryRun    bool
	RequestID string
}

// kind is the job kind req runs as: a dry run is an ordinary job, an
// erasure its own audit record.
func (req EraseRequest) kind() string {
	if req.DryRun {
		return store.JobEraseDryRun
	}
	return store.JobErase
}

// erasures is the erasure kind, its dry run included.
type erasures struct{ kindDeps }

// eraseTask is one erasure.
type eraseTask struct {
	taskHooks
	er  *erasures
	req EraseRequest
}

func (t *eraseTask) kind() string          { return t.req.kind() }
func (t *eraseTask) owner() string         { return t.req.Owner }
func (t *eraseTask) requestID() string     { return t.req.RequestID }
func (t *eraseTask) spec() ([]byte, error) { return t.req.spec() }

func (t *eraseTask) describe(md *pv.JobProgress, _ *store.Job) {
	md.Kind = pv.JobKind_JOB_KIND_ERASE
	md.ValidateOnly = t.req.DryRun
}

func (t *eraseTask) run(ctx context.Context, a *Attempt) (proto.Message, error) {
	return t.er.run(ctx, a, t.req)
}

// again reads erasure job j back from its spec: an erasure prepares
// nothing, and each run of it finds less to do.
func (er *erasures) again(_ context.Context, j store.Job) (task, error) {
	spec := &pv.EraseSpec{}
	if err := proto.Unmarshal(j.Spec, spec); err != nil {
		return nil, fmt.Errorf("job %s: spec: %w", j.ID, err)
	}
	return &eraseTask{er: er, req: EraseRequest{Owner: j.Owner, DryRun: spec.GetDryRun(), RequestID: spec.GetRequestId()}}, nil
}

// leftBehind: what an erasure erased stays erased; a dry run erases
// nothing.
func (*erasures) leftBehind(dryRun bool) string {
	if dryRun {
		return "; a dry run erases nothing"
	}
	return "; what it erased stays erased (the owner's key first), and starting the erasure again finishes it"
}

// expired: an erasure leaves nothing to clean up; run again, it finishes.
func (*erasures) expired(context.Context, store.Job) {}

// IsErasure reports a job kind that is an erasure or its dry run.
func IsErasure(kind string) bool { return kind == store.JobErase || kind == store.JobEraseDryRun }

func (req EraseRequest) spec() ([]byte, error) {
	return proto.Marshal(&pv.EraseSpec{Owner: req.Owner, DryRun: req.DryRun, RequestId: req.RequestID})
}

// ErrOwnerErasing: an erasure of the owner runs; nothing starts for it.
var ErrOwnerErasing = store.ErrOwnerErasing

// StartErase starts an erasure of req.Owner for principal. An owner under
// a legal hold in force is ErrHeld, before anything is erased. Exports
// and imports of the owner, and imports from its backups, running when
// it starts are cancelled, and waited for, before anything is erased;
// none starts after it (the store's fence).
func (er *erasures) start(ctx context.Context, principal string, req EraseRequest) (store.Job, error) {
	if err := records.CheckOwner(req.Owner); err != nil {
		return store.Job{}, invalid(err)
	}
	kind := req.kind()
	if j, seen, err := er.runner.seen(ctx, req.Owner, kind, req.RequestID); seen || err != nil {
		return j, err
	}
	if err := er.erasable(ctx, req.Owner); err != nil {
		return store.Job{}, err
	}
	j, err := er.runner.start(ctx, principal, &eraseTask{er: er, req: req})
	if err == nil {
		er.cfg.Log.Info("audit: owner erasure started", zap.String("audit", "owner.erase"), zap.String("principal", principal),
			zap.String("owner", req.Owner), zap.String("job", j.ID), zap.Bool("dry_run", req.DryRun))
	}
	return j, err
}

// erasable refuses an owner a hold in force keeps.
func (er *erasures) erasable(ctx context.Context, owner string) error {
	holds, err := er.cfg.Store.ListHolds(ctx, owner)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, h := range holds {
		if h.InForce(now) {
			what := "the owner"
			if h.Backup != "" {
				what = "backup " + h.Backup
			}
			return fmt.Errorf("%s is under a legal hold set by %s: release it first: %w", what, h.Principal, ErrHeld)
		}
	}
	return nil
}

// stopOwnerJobs cancels the jobs running for owner or reading its
// backups, on whatever replica runs them, and waits until none runs: an
// export would otherwise write a backup the erasure misses, and an import
// from its backups copy its records on (issue 46, findings 2 and 3). The
// store lets none start once the erasure is stored, so the list only
// shrinks; a job of a replica that died ends when its lease runs out and
// a takeover finds it cancelled. It returns how many it cancelled.
func (er *erasures) stopOwnerJobs(ctx context.Context, a *Attempt, owner string) (uint64, error) {
	asked := map[string]bool{}
	lastLog := time.Time{}
	for {
		ids, err := er.cfg.Store.RunningJobsFor(ctx, owner)
		if err != nil {
			return uint64(len(asked)), err
		}
		if len(ids) == 0 {
			return uint64(len(asked)), nil
		}
		for _, id := range ids {
			if asked[id] {
				continue
			}
			if _, err := er.runner.Cancel(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrFailedPrecondition) {
				return uint64(len(asked)), fmt.Errorf("cancel job %s of the owner: %w", id, err)
			}
			asked[id] = true
			er.cfg.Log.Info("audit: job cancelled by an erasure", zap.String("audit", "owner.erase.cancel"), zap.String("erasure", a.job.ID),
				zap.String("owner", owner), zap.String("job", id))
		}
		if time.Since(lastLog) > 30*time.Second {
			lastLog = time.Now()
			er.cfg.Log.Info("erasure waits for the owner's jobs to stop", zap.String("erasure", a.job.ID), zap.String("owner", owner), zap.Strings("jobs", ids))
		}
		select {
		case <-ctx.Done():
			return uint64(len(asked)), context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// run is an erasure's body, in the order above; a dry run counts.
func (er *erasures) run(ctx context.Context, a *Attempt, req EraseRequest) (proto.Message, error) {
	owner := req.Owner
	if err := er.erasable(ctx, owner); err != nil {
		return nil, err
	}
	a.SetPhase(pv.JobPhase_JOB_PHASE_TRANSFERRING)
	if req.DryRun {
		return er.count(ctx, owner)
	}
	result := &pv.EraseJobResult{}
	// The name is erased from here on: schedules that still list it skip
	// it until an operator re-enables it (ReenableOwner), so a device
	// still writing under the name starts no new backups (finding 6).
	if err := er.cfg.Store.MarkOwnerErased(ctx, owner, a.job.ID, time.Now()); err != nil {
		return nil, err
	}
	cancelled, err := er.stopOwnerJobs(ctx, a, owner)
	result.JobsCancelled = cancelled
	if err != nil {
		return nil, err
	}
	// The KEKs that wrap what is destroyed next are noted first: the
	// key worker retires them, which completes the erasure against the
	// deleted rows the database files keep (retire.go).
	if err := er.keys.noteErasureKEKs(ctx, owner, a.job.ID); err != nil {
		return nil, fmt.Errorf("note the owner key's key-encryption key: %w", err)
	}
	if err := er.cfg.Store.DestroyOwnerKey(ctx, owner); err != nil {
		return nil, fmt.Errorf("destroy the owner's key: %w", err)
	}
	result.KeyDestroyed = true
	er.cfg.Log.Info("audit: owner key destroyed", zap.String("audit", "owner.erase.key"), zap.String("principal", a.job.Principal),
		zap.String("owner", owner), zap.String("job", a.job.ID))
	for {
		// Newest first: an increment goes before the base it needs.
		page, err := er.cfg.Store.ListBackups(ctx, store.BackupQuery{Owner: owner, Limit: 100})
		if err != nil {
			return nil, err
		}
		for _, b := range page {
			n, err := er.catalog.deleteBackupCounting(ctx, b)
			if errors.Is(err, store.ErrNotFound) {
				n, err = 0, nil // gone since the page was read
			}
			if err != nil {
				return nil, fmt.Errorf("erase backup %s: %w", b.ID, err)
			}
			result.Backups++
			result.Objects += n
			a.Records().Add(1)
		}
		if len(page) < 100 {
			break
		}
	}
	n, err := er.sweepOwnerObjects(ctx, owner, false)
	if err != nil {
		return nil, err
	}
	result.Objects += n
	counts, err := er.cfg.Store.EraseOwnerRows(ctx, owner, a.job.ID)
	if err != nil {
		return nil, err
	}
	counts["backups"] += int64(result.Backups)
	result.Rows = tableRows(counts)
	if err := er.cfg.Store.ScrubFreed(ctx); err != nil {
		return nil, err
	}
	if er.cfg.Freshness.OwnerErased != nil {
		er.cfg.Freshness.OwnerErased(owner)
	}
	er.keys.wakeKeyWorker()
	er.cfg.Log.Info("audit: owner erased", zap.String("audit", "owner.erase.done"), zap.String("principal", a.job.Principal),
		zap.String("owner", owner), zap.String("job", a.job.ID), zap.Uint64("backups", result.Backups), zap.Uint64("objects", result.Objects))
	return result, nil
}

// count is a dry run's body: what an erasure of owner would cancel and
// delete, counted, with nothing changed.
func (er *erasures) count(ctx context.Context, owner string) (proto.Message, error) {
	result := &pv.EraseJobResult{DryRun: true}
	running, err := er.cfg.Store.RunningJobsFor(ctx, owner)
	if err != nil {
		return nil, err
	}
	result.JobsCancelled = uint64(len(running))
	counts, err := er.cfg.Store.CountOwnerRows(ctx, owner)
	if err != nil {
		return nil, err
	}
	// What an erasure would delete: not this dry run (it counted
	// itself, "2 jobs" for one, finding 11) nor the erasure records
	// it keeps.
	kept, err := er.erasureRecords(ctx, owner)
	if err != nil {
		return nil, err
	}
	counts["jobs"] = max(0, counts["jobs"]-1-kept)
	result.Rows = tableRows(counts)
	result.Backups = uint64(counts["backups"])
	n, err := er.sweepOwnerObjects(ctx, owner, true)
	if err != nil {
		return nil, err
	}
	result.Objects = n
	return result, nil
}

// erasureRecords counts the owner's erasure jobs, which an erasure keeps.
func (er *erasures) erasureRecords(ctx context.Context, owner string) (int64, error) {
	var n int64
	after := ""
	for {
		page, err := er.cfg.Store.ListJobs(ctx, store.JobQuery{Owner: owner, After: after, Limit: 500})
		if err != nil {
			return 0, err
		}
		for _, j := range page {
			if j.Kind == store.JobErase {
				n++
			}
		}
		if len(page) < 500 {
			return n, nil
		}
		after = page[len(page)-1].ID
	}
}

// sweepOwnerObjects deletes (or, for a dry run, counts) every object
// directly under the owner's directory in every bucket, for every prefix
// this server writes under ("" and each schedule's). Only direct
// children are listed (delimiter "/"): an owner whose name is a
// schedule's prefix never reaches another owner's objects under it.
func (er *erasures) sweepOwnerObjects(ctx context.Context, owner string, dryRun bool) (uint64, error) {
	prefixes := []string{""}
	if p := er.catalog.schedules.Load(); p != nil {
		for _, s := range p.Schedules {
			if !slices.Contains(prefixes, s.Prefix) {
				prefixes = append(prefixes, s.Prefix)
			}
		}
	}
	var n uint64
	for _, name := range er.cfg.Buckets.Names() {
		bucket, err := er.cfg.Buckets.Open(ctx, name)
		if err != nil {
			return n, err
		}
		for _, prefix := range prefixes {
			dir := ownerDir(prefix, owner)
			it := bucket.List(&blob.ListOptions{Prefix: dir, Delimiter: "/"})
			for {
				obj, err := it.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return n, fmt.Errorf("bucket %s: list the owner's objects: %w", name, err)
				}
				if obj.IsDir || strings.Contains(strings.TrimPrefix(obj.Key, dir), "/") {
					continue
				}
				if !dryRun {
					if err := bucket.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
						return n, fmt.Errorf("bucket %s: delete an object of the owner: %w", name, err)
					}
				}
				n++
			}
			aborted, err := er.abortOwnerUploads(ctx, name, bucket, dir, dryRun)
			n += aborted
			if err != nil {
				return n, err
			}
			if local := er.cfg.Buckets.LocalDir(name); local != "" && !dryRun {
				// A file bucket's directory of the owner, emptied: its
				// name is the owner's (finding 11). Remove fails on a
				// directory that is not empty (another prefix's owner
				// under it), which stays.
				_ = os.Remove(filepath.Join(local, filepath.FromSlash(strings.TrimSuffix(dir, "/"))))
			}
		}
	}
	return n, nil
}

// abortOwnerUploads aborts (or, for a dry run, counts) the incomplete
// multipart uploads directly under dir in bucket name, with the
// binary's Config.AbortUploads (the S3 SDK's; nil links none).
func (er *erasures) abortOwnerUploads(ctx context.Context, name string, bucket *blob.Bucket, dir string, dryRun bool) (uint64, error) {
	if er.cfg.AbortUploads == nil {
		return 0, nil
	}
	n, err := er.cfg.AbortUploads(ctx, bucket, er.cfg.Buckets.S3Name(name), dir, dryRun)
	if err != nil {
		return n, fmt.Errorf("bucket %s: the owner's incomplete uploads: %w", name, err)
	}
	return n, nil
}

func tableRows(counts map[string]int64) []*pv.TableRows {
	out := make([]*pv.TableRows, 0, len(store.OwnerRowTables))
	for _, t := range store.OwnerRowTables {
		out = append(out, &pv.TableRows{Table: t, Rows: counts[t]})
	}
	return out
}

// OwnerErasure returns owner's erasure record (store.ErrNotFound for a
// name never erased).
func (m *Manager) OwnerErasure(ctx context.Context, owner string) (store.ErasedOwner, error) {
	if err := records.CheckOwner(owner); err != nil {
		return store.ErasedOwner{}, invalid(err)
	}
	return m.cfg.Store.OwnerErased(ctx, owner)
}

// maxReenableReason bounds the reason a re-enabling records.
const maxReenableReason = 512

// ReenableOwner lets schedules back up an erased owner's name again, for
// principal, who says why (reason, required: it is the audit record). A
// name never erased is store.ErrNotFound; one whose erasure still runs
// is ErrOwnerErasing.
func (m *Manager) ReenableOwner(ctx context.Context, principal, owner, reason string) (store.ErasedOwner, error) {
	if err := records.CheckOwner(owner); err != nil {
		return store.ErasedOwner{}, invalid(err)
	}
	if err := checkReason(reason, maxReenableReason, "why the name may be backed up again"); err != nil {
		return store.ErasedOwner{}, invalid(err)
	}
	if id, err := m.cfg.Store.RunningErasure(ctx, owner); err != nil {
		return store.ErasedOwner{}, err
	} else if id != "" {
		return store.ErasedOwner{}, fmt.Errorf("erasure %s: %w", id, ErrOwnerErasing)
	}
	e, err := m.cfg.Store.ReenableOwner(ctx, owner, principal, reason, time.Now())
	if err != nil {
		return store.ErasedOwner{}, err
	}
	m.cfg.Log.Info("audit: erased owner re-enabled for schedules", zap.String("audit", "owner.reenable"), zap.String("principal", principal),
		zap.String("owner", owner), zap.String("erasure", e.Job), zap.String("reason", reason))
	return e, nil
}
