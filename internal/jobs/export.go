package jobs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync/atomic"
	"time"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"

	"go.uber.org/zap"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	dsb "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// An export writes a new backup of its owner: a catalog row made WRITING
// at its start, an object sealed with a fresh data key at a key the
// server chooses (one per attempt, AttemptKey), its summary as a sidecar,
// and the row completed, fenced by the attempt, once the object is
// committed and checked. A failed export leaves no object and no row.

// exports is the export kind.
type exports struct{ kindDeps }

// exportTask is one export, as its start or takeover prepared it.
type exportTask struct {
	ex  *exports
	req ExportRequest
	p   prepared
}

// start starts an export for principal; sched, when set, is the
// schedule it runs for (its prefix, and its retention once it ends well).
func (ex *exports) start(ctx context.Context, principal string, req ExportRequest, sched *Schedule) (store.Job, error) {
	owner := req.Owner
	if err := records.CheckOwner(owner); err != nil {
		return store.Job{}, invalid(err)
	}
	if j, seen, err := ex.runner.seen(ctx, owner, store.JobExport, req.RequestID); seen || err != nil {
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
		opts, err := ex.synthesisSource(ctx, owner, req)
		if err != nil {
			return store.Job{}, err
		}
		req.Options = opts
		if req.Label == "" {
			req.Label = "synthetic full of " + req.From
		}
	}
	if req.Since != "" {
		base, opts, err := ex.chainBase(ctx, owner, req.Since, req.Options)
		if err != nil {
			return store.Job{}, err
		}
		req.Options, changedAfter = opts, &base.Summary.ChangeSeq
	}
	bucketName := req.Bucket
	if bucketName == "" {
		bucketName = ex.cfg.Buckets.Default()
	}
	bucket, err := ex.catalog.openBucket(ctx, bucketName)
	if err != nil {
		return store.Job{}, err
	}
	if _, err := ex.catalog.admitSpace(ctx, owner, bucketName); err != nil {
		return store.Job{}, err
	}
	options, err := proto.Marshal(req.Options)
	if err != nil {
		return store.Job{}, fmt.Errorf("encode options: %w", err)
	}
	now := time.Now()
	id := NewID(now)
	key, wrapped, ownerKeyID, err := ex.keys.newDataKey(ctx, owner, id)
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
	return ex.runner.start(ctx, principal, &exportTask{ex: ex, req: req,
		p: prepared{key: key, bucket: bucket, backup: b, schedule: sched, changedAfter: changedAfter}})
}

// chainBase reads the base an increment of owner names: one of the
// owner's complete backups whose change sequence is known (another
// owner's reads as missing). The increment keeps the base's options:
// given none it takes them, given others it is refused, since a chain
// whose members select differently restores to neither selection.
func (ex *exports) chainBase(ctx context.Context, owner, id string, opts *dsb.ArchiveOptions) (store.Backup, *dsb.ArchiveOptions, error) {
	base, err := ex.catalog.Backup(ctx, owner, id)
	if err != nil {
		return store.Backup{}, nil, fmt.Errorf("since_backup: %w", err)
	}
	if base.State != store.BackupComplete {
		return store.Backup{}, nil, fmt.Errorf("since_backup %s: %w", base.ID, ErrBackupNotComplete)
	}
	if base.Summary.ChangeSeq < 0 {
		return store.Backup{}, nil, fmt.Errorf("since_backup %s: %w", base.ID, ErrNoChangeSequence)
	}
	floor, err := ex.cfg.Store.BaseFloor(ctx, owner)
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

// run is an export's body: its archive written to this attempt's object,
// committed, checked, and its catalog row completed.
func (ex *exports) run(ctx context.Context, a *Attempt, req ExportRequest, p prepared) (proto.Message, error) {
	reservation := backup.ExportReservation(int64(ex.cfg.Import.Reader.MaxRecordSize)) + blobBufferSize
	reserve := ex.cfg.Pool.NewCall("export job", reservation)
	defer reserve.Close()
	if err := reserve.Charge(reservation); err != nil {
		return nil, err
	}
	// Each attempt writes its own object: a stale attempt (one that lost
	// its lease and does not know it yet) can neither overwrite nor, in
	// its cleanup, delete what a later attempt committed.
	dest := &pv.ObjectLocation{Bucket: p.backup.Bucket, Key: AttemptKey(p.backup.ObjectKey, a.job.Attempt)}
	space, err := ex.catalog.admitSpace(ctx, p.backup.Owner, p.backup.Bucket)
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
	a.SetPhase(pv.JobPhase_JOB_PHASE_TRANSFERRING)
	out := &countingWriter{w: w, hash: sha256.New(), n: a.Bytes(), space: space}
	exportedAt, counts, err := ex.writeArchive(ctx, a, req, p, out)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		abort()
		_ = w.Close()
		return nil, err
	}
	a.SetPhase(pv.JobPhase_JOB_PHASE_COMMITTING)
	if err := w.Close(); err != nil {
		if gcerrors.Code(err) == gcerrors.FailedPrecondition {
			return nil, fmt.Errorf("destination %s/%.64s, created while the export ran: %w", dest.GetBucket(), dest.GetKey(), ErrObjectExists)
		}
		return nil, fmt.Errorf("commit object: %w", err)
	}
	summary := &pv.ExportSummary{Groups: counts.Groups, Messages: counts.Messages, ConsentRecords: counts.Consent,
		ArchiveBytes: a.Bytes().Load(), Sha256: out.hash.Sum(nil), ExportedAtNs: exportedAt,
		ExcludedRecords: counts.Excluded, RepairedRecords: counts.Repaired}
	result := &pv.ExportJobResult{Summary: summary, Archive: dest, Backup: p.backup.ID,
		Sidecar: &pv.ObjectLocation{Bucket: dest.GetBucket(), Key: dest.GetKey() + SidecarSuffix}}
	err = ex.commit(ctx, p.bucket, result)
	if err == nil {
		err = ex.cfg.Store.CompleteBackup(ctx, p.backup.Owner, p.backup.ID, a.Fence(), store.BackupSummary{
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
	ex.tidy(ctx, a, p)
	return result, nil
}

// commit checks the committed object against the summary and writes the
// sidecar.
func (ex *exports) commit(ctx context.Context, bucket *blob.Bucket, result *pv.ExportJobResult) error {
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

// blobBufferSize is the blob writer's buffer: an S3 multipart part (at
// least 5 MiB), one at a time.
const blobBufferSize = 8 << 20

// countingWriter counts and hashes what reaches the object, and holds it
// to the export's space (nil: none).
type countingWriter struct {
	w     io.Writer
	hash  hash.Hash
	n     *atomic.Uint64
	space *spaceGuard
}

// tidy removes what a completed backup leaves useless: the objects of
// earlier attempts, and tombstones no restore needs any more.
func (ex *exports) tidy(ctx context.Context, a *Attempt, p prepared) {
	if a.job.Attempt > 1 {
		// Earlier attempts' objects are no backup: the catalog names
		// this one. A stale attempt may have committed after the
		// takeover cleared them.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = ex.catalog.deleteAttempts(dctx, p.bucket, p.backup.ObjectKey, 1, a.job.Attempt-1)
	}
	// Tombstones at or below the owner's oldest backup serve no restore
	// (store.Tombstones). One export job runs per owner at a time, so no
	// backup being written can still need them.
	if _, err := ex.cfg.Store.PruneTombstones(ctx, p.backup.Owner); err != nil {
		ex.cfg.Log.Warn("tombstones not pruned", zap.Error(err))
	}
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

// errSizeMismatch: the committed object is not what was written.
var errSizeMismatch = errors.New("the committed object's size differs from the bytes written")

// sidecarJSON is the sidecar's content: the export's result as JSON.
func sidecarJSON(result *pv.ExportJobResult) ([]byte, error) {
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("encode sidecar: %w", err)
	}
	return append(b, '\n'), nil
}

// again reads export job j back from its spec and prepares its backup
// row for another attempt. Whatever earlier attempts committed (one may
// have died between its commit and the catalog's) is no backup: it goes.
func (ex *exports) again(ctx context.Context, j store.Job) (task, error) {
	spec := &pv.ExportSpec{}
	if err := proto.Unmarshal(j.Spec, spec); err != nil {
		return nil, fmt.Errorf("job %s: spec: %w", j.ID, err)
	}
	req := ExportRequest{Owner: j.Owner, Bucket: spec.GetBucket(), Label: spec.GetLabel(), Options: spec.GetOptions(),
		Nonconforming: nonconformingOf(spec.GetNonconforming()), RequestID: spec.GetRequestId(), Since: spec.GetSinceBackup(), From: spec.GetFromBackup()}
	md, err := Progress(j)
	if err != nil {
		return nil, err
	}
	p, err := ex.prepareAgain(ctx, j, md.GetBackup())
	if err != nil {
		return nil, err
	}
	return &exportTask{ex: ex, req: req, p: p}, nil
}

func (ex *exports) prepareAgain(ctx context.Context, j store.Job, backupID string) (prepared, error) {
	b, err := ex.cfg.Store.GetBackup(ctx, j.Owner, backupID)
	if err != nil {
		return prepared{}, fmt.Errorf("job %s: backup %s: %w", j.ID, backupID, err)
	}
	if b.State != store.BackupWriting || b.JobID != j.ID {
		return prepared{}, fmt.Errorf("job %s: backup %s is no longer this job's to write: %w", j.ID, b.ID, ErrBackupDamaged)
	}
	key, err := ex.keys.unwrap(ctx, b)
	if err != nil {
		return prepared{}, err
	}
	bucket, err := ex.cfg.Buckets.Open(ctx, b.Bucket)
	if err != nil {
		return prepared{}, fmt.Errorf("backup %s: %w", b.ID, err)
	}
	if _, err := ex.catalog.deleteAttempts(ctx, bucket, b.ObjectKey, 1, j.Attempt-1); err != nil {
		return prepared{}, fmt.Errorf("backup %s: clear the earlier attempts' objects: %w", b.ID, err)
	}
	p := prepared{key: key, bucket: bucket, backup: b}
	if b.Base != "" {
		base, err := ex.cfg.Store.GetBackup(ctx, j.Owner, b.Base)
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

// expired deletes the catalog row of an export whose servers died: the
// row was WRITING and its object was never committed (an aborted upload
// is no object), so it is no backup.
func (ex *exports) expired(ctx context.Context, j store.Job) {
	md, err := Progress(j)
	if err != nil || md.GetBackup() == "" {
		return
	}
	b, err := ex.cfg.Store.GetBackup(ctx, j.Owner, md.GetBackup())
	if err != nil || b.State != store.BackupWriting {
		return
	}
	if err := ex.catalog.deleteBackup(ctx, b); err != nil {
		ex.cfg.Log.Warn("dead export's catalog row not deleted", zap.String("job", j.ID), zap.String("backup", b.ID), zap.Error(err))
	}
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

// leftBehind: an export that stops part-way commits nothing.
func (*exports) leftBehind(bool) string { return "; nothing was committed" }

func (t *exportTask) kind() string          { return store.JobExport }
func (t *exportTask) owner() string         { return t.req.Owner }
func (t *exportTask) requestID() string     { return t.req.RequestID }
func (t *exportTask) spec() ([]byte, error) { return t.req.spec() }

func (t *exportTask) describe(md *pv.JobProgress, j *store.Job) {
	md.Kind = pv.JobKind_JOB_KIND_EXPORT
	md.Backup = t.p.backup.ID
	md.Object = &pv.ObjectLocation{Bucket: t.p.backup.Bucket, Key: t.p.backup.ObjectKey}
	t.p.backup.JobID = j.ID
}

// stored writes the backup's catalog row, WRITING, once its job is.
func (t *exportTask) stored(ctx context.Context, _ store.Job) error {
	return t.ex.cfg.Store.CreateBackup(ctx, t.p.backup)
}

func (t *exportTask) run(ctx context.Context, a *Attempt) (proto.Message, error) {
	result, err := t.ex.run(ctx, a, t.req, t.p)
	if rr, ok := result.(*pv.ExportJobResult); ok && err == nil {
		s := rr.GetSummary()
		a.Done(s.GetGroups() + s.GetMessages() + s.GetConsentRecords() + 1)
	}
	return result, err
}

// settle: a backup whose export failed is no backup. Its object was
// aborted or deleted, and its row goes too, fenced by this attempt: a row
// a later attempt holds is not this one's to drop.
func (t *exportTask) settle(ctx context.Context, a *Attempt) {
	err := t.ex.cfg.Store.AbandonBackup(ctx, t.p.backup.Owner, t.p.backup.ID, a.Fence())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.ex.cfg.Log.Warn("failed backup's catalog row not deleted", zap.String("job", a.job.ID), zap.String("backup", t.p.backup.ID), zap.Error(err))
	}
}

// ended tells monitoring how the export went (Freshness) and, for a
// schedule's export that ended well, prunes the schedule's backups of the
// owner.
func (t *exportTask) ended(ctx context.Context, _ *Attempt, end store.JobEnd, err error) {
	cfg, b := t.ex.cfg, t.p.backup
	if cfg.Freshness.ExportBlocked != nil {
		var unexportable *backup.UnexportableError
		switch {
		case errors.As(err, &unexportable):
			cfg.Freshness.ExportBlocked(b.Schedule, b.Owner, true)
		case end.State == store.JobSucceeded:
			cfg.Freshness.ExportBlocked(b.Schedule, b.Owner, false)
		}
	}
	if end.State != store.JobSucceeded {
		return
	}
	if b.Schedule != "" && cfg.Freshness.BackupSucceeded != nil {
		cfg.Freshness.BackupSucceeded(b.Schedule, b.Owner, end.At)
	}
	if t.p.schedule != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err := t.ex.catalog.Prune(sctx, t.p.schedule, b.Owner)
		if err != nil {
			cfg.Log.Warn("retention", zap.String("schedule", t.p.schedule.Name), zap.String("owner", b.Owner), zap.Error(err))
		}
		if cfg.Freshness.RetentionRan != nil {
			cfg.Freshness.RetentionRan(t.p.schedule.Name, time.Now(), err)
		}
	}
}
