package store

import (
	"context"
	"time"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// HistoryFiles is the history server's catalog: one row per archive an
// installation uploaded for another to download (XMTP device sync). The
// server holds no key: a row names an opaque object, its size and its
// deadline. It is the server's own table, shared by the fleet.
type HistoryFiles interface {
	// CreateHistoryFile records an upload that is starting
	// (HistoryUploading); an id already used is ErrFailedPrecondition.
	CreateHistoryFile(ctx context.Context, f HistoryFile) error
	// FinishHistoryFile marks an upload whole (HistoryReady) with its
	// size, to expire at expires; an upload's row expires at its body's
	// deadline until then, so the sweep releases what a dead upload
	// reserved. ErrNotFound when the row is gone or not uploading.
	FinishHistoryFile(ctx context.Context, id string, size int64, expires time.Time) error
	// GetHistoryFile returns one file or ErrNotFound.
	GetHistoryFile(ctx context.Context, id string) (HistoryFile, error)
	// CountHistoryDownload counts a download of a ready file and returns
	// the count, this one included; a file not ready is ErrNotFound.
	CountHistoryDownload(ctx context.Context, id string) (int64, error)
	// DeleteHistoryFile removes a file's row (its object is deleted
	// first); a missing one is no error.
	DeleteHistoryFile(ctx context.Context, id string) error
	// HistoryFilesBefore returns up to limit files whose expires_ns is at
	// or before t, earliest first: what the sweep deletes.
	HistoryFilesBefore(ctx context.Context, t time.Time, limit int) ([]HistoryFile, error)
	// EvictableHistoryFiles returns up to limit ready files created
	// before createdBefore, oldest first: what a full server may evict
	// (never an upload running, never a file younger than the minimum
	// age).
	EvictableHistoryFiles(ctx context.Context, createdBefore time.Time, limit int) ([]HistoryFile, error)
	// ReserveHistoryBytes adds delta to the size of upload id (which
	// must be uploading) if every file's size together stays within
	// maxTotal, else ErrHistoryFull; the check and the claim are one
	// transaction that no other reservation interleaves.
	ReserveHistoryBytes(ctx context.Context, id string, delta, maxTotal int64) error
	// HistoryBytes is the size of every file stored, and the count.
	HistoryBytes(ctx context.Context) (bytes, files int64, err error)
}

// ErrHistoryFull: the history server's total would pass its limit.
var ErrHistoryFull = fault.New(fault.Exhausted, "the history server is full")

// History file states.
const (
	HistoryUploading = "uploading"
	HistoryReady     = "ready"
)

// HistoryFile is one row of the history server's catalog.
type HistoryFile struct {
	ID, ObjectKey, State string
	// Size is the bytes stored (an upload's, once whole; its limit
	// while it runs, so the total is never under-counted).
	Size             int64
	Created, Expires time.Time
	Downloads        int64
}
