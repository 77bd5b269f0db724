package jobs

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	dsb "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// A synthetic full backup (ExportRequest.From) is a backup's snapshot
// written as one archive without reading the owner's records: its chain
// read as one (backup.Chain) and written out. It is what an importer that
// can only add (the reference client) restores exactly. It records no
// change sequence, so no increment is based on it: the tombstones an
// increment of it would need, between its snapshot and the owner's
// oldest backup, may already be pruned.

// synthesisSource checks the backup a synthetic full is made from: a
// complete backup of owner whose chain is whole, and options that are
// its own. It returns the options the new backup takes.
func (ex *exports) synthesisSource(ctx context.Context, owner string, req ExportRequest) (*dsb.ArchiveOptions, error) {
	if req.Since != "" {
		return nil, invalid(fmt.Errorf("from_backup: a synthetic full is a full backup; since_backup makes an increment"))
	}
	src, err := ex.catalog.Backup(ctx, owner, req.From)
	if err != nil {
		return nil, fmt.Errorf("from_backup: %w", err)
	}
	if src.State != store.BackupComplete {
		return nil, fmt.Errorf("from_backup %s: %w", src.ID, ErrBackupNotComplete)
	}
	chain, err := ex.catalog.chainOf(ctx, owner, src)
	if err != nil {
		return nil, err
	}
	for _, b := range chain {
		if err := ex.catalog.checkObject(ctx, b); err != nil {
			return nil, err
		}
	}
	opts, err := optionsOf(src)
	if err != nil {
		return nil, err
	}
	if req.Options != nil && !sameOptions(opts, req.Options) {
		return nil, invalid(fmt.Errorf("options: a synthetic full keeps the options of %s; omit them", src.ID))
	}
	return opts, nil
}

// optionsOf is the options backup b was exported with (nil: the
// defaults).
func optionsOf(b store.Backup) (*dsb.ArchiveOptions, error) {
	if len(b.Options) == 0 {
		return nil, nil
	}
	opts := &dsb.ArchiveOptions{}
	if err := proto.Unmarshal(b.Options, opts); err != nil {
		return nil, fmt.Errorf("backup %s: options: %w", b.ID, err)
	}
	return opts, nil
}

// sameOptions reports whether two options select the same records once
// their defaults are applied.
func sameOptions(a, b *dsb.ArchiveOptions) bool {
	ra, errA := backup.Resolve(a)
	rb, errB := backup.Resolve(b)
	return errA == nil && errB == nil && proto.Equal(ra, rb)
}

// writeArchive writes an export job's archive to out: the owner's records
// as they stand now, or, for a synthetic full, req.From's snapshot. It
// returns the archive's export time and what it holds.
func (ex *exports) writeArchive(ctx context.Context, a *Attempt, req ExportRequest, p prepared, out io.Writer) (int64, backup.Counts, error) {
	if req.From == "" {
		exportedAt := time.Now().UnixNano()
		counts, err := backup.Export(ctx, ex.cfg.Store, req.Owner, p.key, req.Options, exportedAt, out,
			backup.ExportConfig{Nonconforming: req.Nonconforming, Written: a.Records(), ChangedAfter: p.changedAfter})
		return exportedAt, counts, err
	}
	src, err := ex.catalog.Backup(ctx, req.Owner, req.From)
	if err != nil {
		return 0, backup.Counts{}, fmt.Errorf("from_backup: %w", err)
	}
	// The bytes read are not the job's: it reports what it wrote.
	c, closeChain, err := ex.catalog.readChain(ctx, req.Owner, src, new(atomic.Uint64))
	if err != nil {
		return 0, backup.Counts{}, err
	}
	defer closeChain()
	meta, _ := c.Metadata()
	counts, err := backup.Synthesize(c, out, p.key, a.Records())
	counts.ChangeSeq = -1
	return meta.GetExportedAtNs(), counts, err
}
