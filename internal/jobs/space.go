package jobs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// Space is shared fairly: one owner's backups cannot fill what every
// owner's writes need. Two limits hold an export, each checked before it
// writes a byte and again as it writes:
//
//   - the owner's quota: what its complete backups hold (the catalog's
//     sum of their archive bytes, not a listing of the bucket) plus what
//     this export has written may not pass OwnerQuota;
//   - a file bucket's reserve: the filesystem under it keeps Reserve bytes
//     free, so with the default layout (the store and the file bucket on
//     one disk) backups never take the space the store's writes need.
//
// Past either, the export is RESOURCE_EXHAUSTED naming the limit, and
// commits nothing.

// ErrOwnerQuota: the owner's backups would pass its quota.
var ErrOwnerQuota = fault.NewReason(fault.Exhausted, fault.ReasonOwnerQuota, "the owner's backups would pass its quota")

// ErrBucketReserve: the bucket's filesystem would pass its free-space
// reserve.
var ErrBucketReserve = fault.NewReason(fault.Exhausted, fault.ReasonBucketFull, "the bucket's disk would pass its free-space reserve")

// Defaults of Config.OwnerQuota and Config.BucketReserve.
const (
	DefaultOwnerQuota    = 10 << 30
	DefaultBucketReserve = 1 << 30
)

// spaceCheckEvery is how often, in bytes written, an export checks its
// bucket's free space again.
const spaceCheckEvery = 64 << 20

// LocalDir is the directory of a file bucket ("" for any other kind), for
// its free-space reserve.
func (b *Buckets) LocalDir(name string) string {
	raw, ok := b.urls[name]
	if !ok || !strings.HasPrefix(raw, "file://") {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Path
}

// S3Name is the bucket name of an S3 bucket ("" for any other kind), for
// what only the S3 API reaches (incomplete multipart uploads).
func (b *Buckets) S3Name(name string) string {
	raw, ok := b.urls[name]
	if !ok || !strings.HasPrefix(raw, "s3://") {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// FreeBytes is what an unprivileged writer may still write on the
// filesystem holding dir (its nearest existing ancestor).
func FreeBytes(dir string) (uint64, error) {
	st, err := statfs(dir)
	if err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// DiskBytes is the size of the filesystem dir is on (or will be on, as
// FreeBytes finds it).
func DiskBytes(dir string) (uint64, error) {
	st, err := statfs(dir)
	if err != nil {
		return 0, fmt.Errorf("size of the disk of %s: %w", dir, err)
	}
	return st.Blocks * uint64(st.Bsize), nil
}

// statfs describes the filesystem of dir's nearest existing ancestor: a
// bucket directory is made on its first write, on the filesystem its
// ancestor is on.
func statfs(dir string) (unix.Statfs_t, error) {
	var st unix.Statfs_t
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		err := unix.Statfs(d, &st)
		if err == nil || !errors.Is(err, unix.ENOENT) || d == filepath.Dir(d) {
			return st, err
		}
	}
}

// spaceGuard holds one export to its owner's quota and its bucket's
// reserve.
type spaceGuard struct {
	quotaLeft int64 // bytes the owner may still add; < 0: no quota
	quota     int64
	dir       string // a file bucket's directory, or ""
	reserve   int64
	checked   atomic.Int64 // bytes written at the last free-space check
}

// admitSpace checks, before an export writes, that owner may add to its
// backups and that the bucket has room above its reserve.
func (cat *Catalog) admitSpace(ctx context.Context, owner, bucket string) (*spaceGuard, error) {
	g := &spaceGuard{quotaLeft: -1, quota: cat.cfg.OwnerQuota, reserve: cat.cfg.BucketReserve, dir: cat.cfg.Buckets.LocalDir(bucket)}
	if cat.cfg.OwnerQuota > 0 {
		used, err := cat.cfg.Store.OwnerBackupBytes(ctx, owner)
		if err != nil {
			return nil, err
		}
		g.quotaLeft = cat.cfg.OwnerQuota - int64(min(used, uint64(cat.cfg.OwnerQuota)))
		if g.quotaLeft <= 0 {
			return nil, fmt.Errorf("%w: its backups hold %d bytes, the quota (--owner-backup-quota) is %d: delete backups it no longer needs", ErrOwnerQuota, used, cat.cfg.OwnerQuota)
		}
	}
	if err := g.checkReserve(); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *spaceGuard) checkReserve() error {
	if g.dir == "" || g.reserve <= 0 {
		return nil
	}
	free, err := FreeBytes(g.dir)
	if err != nil {
		return err
	}
	if int64(min(free, 1<<62)) <= g.reserve {
		return fmt.Errorf("%w: %d bytes free under the bucket, the reserve (--bucket-reserve) is %d", ErrBucketReserve, free, g.reserve)
	}
	return nil
}

// wrote checks the limits after written bytes in all.
func (g *spaceGuard) wrote(written int64) error {
	if g.quotaLeft >= 0 && written > g.quotaLeft {
		return fmt.Errorf("%w: the export passed the %d bytes left of the owner's quota (--owner-backup-quota %d)", ErrOwnerQuota, g.quotaLeft, g.quota)
	}
	if written-g.checked.Load() >= spaceCheckEvery {
		g.checked.Store(written)
		return g.checkReserve()
	}
	return nil
}
