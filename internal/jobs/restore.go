package jobs

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"gocloud.dev/gcerrors"

	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// A restore gives back the snapshot its backup was taken from. A full
// backup is that snapshot; an increment holds only what changed since its
// base, and import can add but never replace or remove (ARCH-013,
// ARCH-014), so an increment is never imported alone or after its
// members: its whole chain is read as one snapshot (backup.Chain) and
// that is imported, in one job.

// maxChainMembers bounds the walk down a chain: a catalog that loops (it
// cannot be written so) or a chain far longer than any schedule makes
// stops it.
const maxChainMembers = 1000

// chainOf returns the backups a restore of b reads, oldest first: b alone
// when it is a full backup, else the full backup its chain starts at and
// every increment up to b, each a complete backup of owner.
func (cat *Catalog) chainOf(ctx context.Context, owner string, b store.Backup) ([]store.Backup, error) {
	chain := []store.Backup{b}
	for cur := b; cur.Base != ""; {
		if len(chain) >= maxChainMembers {
			return nil, fmt.Errorf("backup %s: its chain does not end in a full backup within %d members: %w", b.ID, maxChainMembers, ErrBackupDamaged)
		}
		base, err := cat.Backup(ctx, owner, cur.Base)
		if err != nil {
			return nil, fmt.Errorf("backup %s: its base %s: %w", cur.ID, cur.Base, err)
		}
		if base.State != store.BackupComplete {
			return nil, fmt.Errorf("backup %s: its base %s: %w", cur.ID, base.ID, ErrBackupNotComplete)
		}
		chain = append(chain, base)
		cur = base
	}
	slices.Reverse(chain)
	return chain, nil
}

// checkObject checks that b's object is there at the length the catalog
// records, before a job that reads it starts.
func (cat *Catalog) checkObject(ctx context.Context, b store.Backup) error {
	bucket, err := cat.cfg.Buckets.Open(ctx, b.Bucket)
	if err != nil {
		return fmt.Errorf("backup %s: %w", b.ID, err)
	}
	attrs, err := bucket.Attributes(ctx, b.ObjectKey)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("backup %s: its object is gone: %w", b.ID, ErrBackupDamaged)
	}
	if err != nil {
		return fmt.Errorf("backup %s: %w", b.ID, err)
	}
	if uint64(max(attrs.Size, 0)) != b.Summary.Length {
		return fmt.Errorf("backup %s: the object is %d bytes, the catalog says %d: %w", b.ID, attrs.Size, b.Summary.Length, ErrBackupDamaged)
	}
	return nil
}

// openChain opens every member of chain (backups of owner, oldest first)
// for reading as one snapshot. Each member's reader is charged to a
// budget of its own, from the server's pool; the bytes read are counted
// in read. close releases them all.
func (cat *Catalog) openChain(ctx context.Context, owner string, chain []store.Backup, read *atomic.Uint64) (c *backup.Chain, close func(), err error) {
	var closers []func()
	close = func() {
		for _, f := range slices.Backward(closers) {
			f()
		}
	}
	defer func() {
		if err != nil {
			close()
		}
	}()
	members := make([]backup.ChainMember, 0, len(chain))
	for _, b := range chain {
		key, err := cat.keys.unwrap(ctx, b)
		if err != nil {
			return nil, nil, err
		}
		bucket, err := cat.cfg.Buckets.Open(ctx, b.Bucket)
		if err != nil {
			return nil, nil, fmt.Errorf("backup %s: %w", b.ID, err)
		}
		obj, err := bucket.NewReader(ctx, b.ObjectKey, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("backup %s: open object: %w", b.ID, err)
		}
		closers = append(closers, func() { obj.Close() })
		meter := cat.cfg.Pool.NewCall("restore chain reader", backup.ReaderReservation(cat.cfg.Import.Reader))
		closers = append(closers, meter.Close)
		opts := cat.cfg.Import.Reader
		opts.Meter = meter
		ar, err := archive.NewReader(&countingReader{r: obj, n: read}, key, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("backup %s: %w", b.ID, err)
		}
		closers = append(closers, ar.Close)
		members = append(members, backup.ChainMember{Archive: ar, ChangeSeq: b.Summary.ChangeSeq})
	}
	c, err = backup.NewChain(ctx, cat.cfg.Store, owner, members)
	if err != nil {
		return nil, nil, err
	}
	return c, close, nil
}

// readChain opens the chain of owner's backup b (b alone when it is a
// full backup) as one snapshot, the bytes it reads counted in read.
func (cat *Catalog) readChain(ctx context.Context, owner string, b store.Backup, read *atomic.Uint64) (*backup.Chain, func(), error) {
	chain, err := cat.chainOf(ctx, owner, b)
	if err != nil {
		return nil, nil, err
	}
	return cat.openChain(ctx, owner, chain, read)
}

// chainLength is the bytes a restore of chain reads.
func chainLength(chain []store.Backup) uint64 {
	var n uint64
	for _, b := range chain {
		n += b.Summary.Length
	}
	return n
}
