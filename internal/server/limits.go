package server

import (
	"time"

	"github.com/contentbackup/contentbackup/internal/records"
)

// Limits is every bound the server holds callers to, beside the request
// size and batch counts of Config. RELIABILITY.md lists each with its
// default, its flag and the error a caller gets past it.
type Limits struct {
	// MemoryBytes is the server-wide budget every expanding byte is
	// charged to (decompression, decoded values, archive readers, import
	// read-ahead). Past it: RESOURCE_EXHAUSTED "server memory budget".
	MemoryBytes int64
	// CallExpandBytes is one decoding call's budget (Decode, DecodeBatch,
	// Encode of a custom envelope, a ListMessages page).
	CallExpandBytes int64
	// ListPageBytes ends a ListMessages page early, with a token, before
	// its response would pass it; a single larger message is still
	// returned, alone, so every stored message can be listed.
	ListPageBytes int
	// Records bounds each kind of record at every way in.
	Records records.Limits
	// ImportReadAheadBytes bounds the records an import has read but not
	// yet applied; it must hold two of the largest records.
	ImportReadAheadBytes int64
	// ArchiveWindowBytes is the largest zstd window an archive stream may
	// declare (the reference writes 2 MiB).
	ArchiveWindowBytes int
	// MaxArchiveStreams and MaxArchiveStreamsPerOwner bound the archive
	// streams open at once, in all and per owner (per principal for
	// ReadMetadata and Verify, which name no owner).
	MaxArchiveStreams         int
	MaxArchiveStreamsPerOwner int
	// MaxMessageStreams and MaxMessageStreamsPerOwner bound the
	// StreamMessages calls open at once, in all and per owner. A stream
	// whose client reads slowly holds up to three pages of the memory
	// budget until the idle timeout: these keep a few owners' streams from
	// holding all of it.
	MaxMessageStreams         int
	MaxMessageStreamsPerOwner int
	// StreamIdleTimeout ends a client stream that sends nothing for this
	// long: DEADLINE_EXCEEDED.
	StreamIdleTimeout time.Duration
	// MaxConnectionAge closes a connection (after MaxConnectionAgeGrace
	// for calls in flight), so clients reconnect and spread over replicas.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
}

// DefaultLimits fit a 1 GiB container: the memory budget leaves room for
// the Go runtime, gRPC's buffers and the request-size limit.
var DefaultLimits = Limits{
	MemoryBytes:               384 << 20,
	CallExpandBytes:           DefaultMaxBatchExpanded,
	ListPageBytes:             4 << 20,
	Records:                   records.DefaultLimits,
	ImportReadAheadBytes:      80 << 20,
	ArchiveWindowBytes:        8 << 20,
	MaxArchiveStreams:         16,
	MaxArchiveStreamsPerOwner: 2,
	MaxMessageStreams:         32,
	MaxMessageStreamsPerOwner: 4,
	StreamIdleTimeout:         30 * time.Second,
	MaxConnectionAge:          30 * time.Minute,
	MaxConnectionAgeGrace:     10 * time.Minute,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	orDefault(&l.MemoryBytes, d.MemoryBytes)
	orDefault(&l.CallExpandBytes, d.CallExpandBytes)
	orDefault(&l.ListPageBytes, d.ListPageBytes)
	l.Records = l.Records.WithDefaults()
	orDefault(&l.ImportReadAheadBytes, max(d.ImportReadAheadBytes, 4*int64(l.maxArchiveRecord())+1<<20))
	orDefault(&l.ArchiveWindowBytes, d.ArchiveWindowBytes)
	orDefault(&l.MaxArchiveStreams, d.MaxArchiveStreams)
	orDefault(&l.MaxArchiveStreamsPerOwner, d.MaxArchiveStreamsPerOwner)
	orDefault(&l.MaxMessageStreams, d.MaxMessageStreams)
	orDefault(&l.MaxMessageStreamsPerOwner, d.MaxMessageStreamsPerOwner)
	orDefault(&l.StreamIdleTimeout, d.StreamIdleTimeout)
	orDefault(&l.MaxConnectionAge, d.MaxConnectionAge)
	orDefault(&l.MaxConnectionAgeGrace, d.MaxConnectionAgeGrace)
	return l
}

// orDefault sets an unset (zero or negative) limit to its default.
func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// maxArchiveRecord is the largest archive record an import reads: the
// largest record the limits let in, in its element wrapper, with its tag.
func (l Limits) maxArchiveRecord() int {
	return max(l.Records.MessageRecordBytes(), l.Records.GroupBytes) + 1<<10
}
