package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// An import reads one of an owner's complete backups (an increment as
// its whole chain, restore.go) into an owner the caller holds: additive
// and idempotent (ARCH import rules), or in replace mode the owner's
// records made equal to the snapshot.

// imports is the import kind.
type imports struct{ kindDeps }

// importTask is one import, as its start or takeover prepared it.
type importTask struct {
	taskHooks
	im  *imports
	req ImportRequest
	p   prepared
}

// start starts an import for principal: a complete backup of
// req.SourceOwner (or of req.Owner) read into req.Owner. The edge has
// checked that the principal may read the one and write the other.
func (im *imports) start(ctx context.Context, principal string, req ImportRequest) (store.Job, error) {
	if err := records.CheckOwner(req.Owner); err != nil {
		return store.Job{}, invalid(err)
	}
	if j, seen, err := im.runner.seen(ctx, req.Owner, store.JobImport, req.RequestID); seen || err != nil {
		return j, err
	}
	if err := records.CheckOwner(req.source()); err != nil {
		return store.Job{}, invalid(fmt.Errorf("source_owner: %w", err))
	}
	if req.Replace && req.ValidateOnly {
		return store.Job{}, invalid(errors.New("validate_only: not with mode IMPORT_MODE_REPLACE"))
	}
	p, chain, err := im.prepare(ctx, req)
	if err != nil {
		return store.Job{}, err
	}
	// An increment restores as its whole chain: every member must be
	// there before the job starts.
	for _, member := range chain {
		if err := im.catalog.checkObject(ctx, member); err != nil {
			return store.Job{}, err
		}
	}
	return im.runner.start(ctx, principal, &importTask{im: im, req: req, p: p})
}

// prepare opens what an import of req reads: its backup, key and
// bucket, and the chain of backups it restores.
func (im *imports) prepare(ctx context.Context, req ImportRequest) (prepared, []store.Backup, error) {
	source := req.source()
	b, key, err := im.catalog.openBackup(ctx, source, req.Backup)
	if err != nil {
		return prepared{}, nil, err
	}
	bucket, err := im.cfg.Buckets.Open(ctx, b.Bucket)
	if err != nil {
		return prepared{}, nil, fmt.Errorf("backup %s: %w", b.ID, err)
	}
	chain, err := im.catalog.chainOf(ctx, source, b)
	if err != nil {
		return prepared{}, nil, err
	}
	return prepared{key: key, bucket: bucket, backup: b, total: chainLength(chain), sourceOwner: source}, chain, nil
}

// again reads import job j back from its spec, its backup as a start
// would find it now.
func (im *imports) again(ctx context.Context, j store.Job) (task, error) {
	spec := &pv.ImportSpec{}
	if err := proto.Unmarshal(j.Spec, spec); err != nil {
		return nil, fmt.Errorf("job %s: spec: %w", j.ID, err)
	}
	req := ImportRequest{Owner: j.Owner, SourceOwner: spec.GetSourceOwner(), Backup: spec.GetBackup(), RequestID: spec.GetRequestId(),
		ValidateOnly: spec.GetValidateOnly(), Replace: spec.GetMode() == pv.ImportMode_IMPORT_MODE_REPLACE}
	p, _, err := im.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	return &importTask{im: im, req: req, p: p}, nil
}

// leftBehind: an import that stops part-way keeps what it applied, which
// is safe to apply again (ARCH import is additive and idempotent); a
// validate-only one applied nothing.
func (*imports) leftBehind(validateOnly bool) string {
	if validateOnly {
		return "; a validate-only import applies nothing"
	}
	return importLeftBehind
}

// expired: an import leaves nothing to clean up.
func (*imports) expired(context.Context, store.Job) {}

// source is the owner whose backup req reads.
func (req ImportRequest) source() string {
	if req.SourceOwner == "" {
		return req.Owner
	}
	return req.SourceOwner
}

func (t *importTask) kind() string          { return store.JobImport }
func (t *importTask) owner() string         { return t.req.Owner }
func (t *importTask) requestID() string     { return t.req.RequestID }
func (t *importTask) spec() ([]byte, error) { return t.req.spec() }

func (t *importTask) describe(md *pv.JobProgress, j *store.Job) {
	md.Kind = pv.JobKind_JOB_KIND_IMPORT
	md.ValidateOnly = t.req.ValidateOnly
	md.BytesTotal = t.p.total
	md.Backup = t.p.backup.ID
	md.Object = &pv.ObjectLocation{Bucket: t.p.backup.Bucket, Key: t.p.backup.ObjectKey}
	if t.p.sourceOwner != t.req.Owner {
		md.SourceOwner = t.p.sourceOwner
		j.SourceOwner = t.p.sourceOwner
	}
}

// stored records, as an audit event, a restore into another owner.
func (t *importTask) stored(_ context.Context, j store.Job) error {
	if t.p.sourceOwner != t.req.Owner {
		t.im.cfg.Log.Info("audit: backup restored into another owner", zap.String("audit", "backup.migrate"),
			zap.String("principal", j.Principal), zap.String("source_owner", t.p.sourceOwner),
			zap.String("owner", t.req.Owner), zap.String("backup", t.p.backup.ID), zap.String("job", j.ID),
			zap.Bool("validate_only", t.req.ValidateOnly))
	}
	return nil
}

func (t *importTask) run(ctx context.Context, a *Attempt) (proto.Message, error) {
	result, err := t.im.run(ctx, a, t.req, t.p)
	if ir, ok := result.(*pv.ImportJobResult); ok && err == nil {
		a.Done(ir.GetCounts().GetRecords())
	}
	return result, err
}

// run is an import's body: the backup (or its chain) read into the
// owner.
func (im *imports) run(ctx context.Context, a *Attempt, req ImportRequest, p prepared) (proto.Message, error) {
	ahead := im.cfg.Pool.NewCall("import job read-ahead", im.cfg.Import.ReadAheadBytes)
	defer ahead.Close()
	opts := im.cfg.Import
	opts.ReadAhead = ahead
	opts.Progress = a.Records()
	opts.ValidateOnly = req.ValidateOnly
	if req.Replace {
		return im.replace(ctx, a, req, p)
	}
	if p.backup.Base != "" {
		// An increment: its chain read as one snapshot (restore.go).
		c, closeChain, err := im.catalog.readChain(ctx, p.sourceOwner, p.backup, a.Bytes())
		if err != nil {
			return nil, err
		}
		defer closeChain()
		a.SetPhase(pv.JobPhase_JOB_PHASE_TRANSFERRING)
		res, err := backup.ImportFrom(ctx, im.cfg.Store, req.Owner, c, opts)
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
	readerBudget := im.cfg.Pool.NewCall("import job reader", backup.ReaderReservation(im.cfg.Import.Reader))
	defer readerBudget.Close()
	opts.Reader.Meter = readerBudget
	a.SetPhase(pv.JobPhase_JOB_PHASE_TRANSFERRING)
	res, err := backup.Import(ctx, im.cfg.Store, req.Owner, p.key, &countingReader{r: obj, n: a.Bytes()}, opts)
	if err != nil {
		return nil, err
	}
	return &pv.ImportJobResult{Counts: importCounts(res)}, nil
}

const importLeftBehind = "; the records applied so far stay, and starting the import again completes it"

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

// replace is an import job in replace mode: a point-in-time restore of
// the backup's snapshot into the owner (backup.Replace). It raises the
// owner's base floor before its first write and after its last, so no
// backup taken before it ends can be the base of an increment: a chain
// across a replace would restore what the replace deleted.
func (im *imports) replace(ctx context.Context, a *Attempt, req ImportRequest, p prepared) (proto.Message, error) {
	opts, err := optionsOf(p.backup)
	if err != nil {
		return nil, err
	}
	c, closeChain, err := im.catalog.readChain(ctx, p.sourceOwner, p.backup, a.Bytes())
	if err != nil {
		return nil, err
	}
	defer closeChain()
	if _, err := im.cfg.Store.RaiseBaseFloor(ctx, req.Owner); err != nil {
		return nil, err
	}
	a.SetPhase(pv.JobPhase_JOB_PHASE_TRANSFERRING)
	res, err := backup.Replace(ctx, im.cfg.Store, req.Owner, c, opts, a.Records())
	if err != nil {
		return nil, err
	}
	if _, err := im.cfg.Store.RaiseBaseFloor(ctx, req.Owner); err != nil {
		return nil, err
	}
	meta, _ := c.Metadata()
	kinds := func(k backup.KindCounts) *pv.KindCounts {
		return &pv.KindCounts{Groups: k.Groups, Messages: k.Messages, Consent: k.Consent}
	}
	return &pv.ImportJobResult{
		Counts: &pv.ImportCounts{Metadata: meta, Records: res.Records},
		Replaced: &pv.ReplaceCounts{Written: kinds(res.Written), Deleted: kinds(res.Deleted), Unchanged: kinds(res.Unchanged),
			Expired: res.Expired, Conflicts: res.Conflicts},
	}, nil
}
