package archive

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/wire"
)

// Default limits of a Reader. A record's length is read before its bytes,
// and the zstd frame names its window before any block: both are checked
// against a limit first, so a hostile archive cannot make the reader
// allocate more than these.
const (
	// DefaultMaxRecordSize bounds one record's ciphertext. A message's
	// content is capped well below it by every producer of real archives.
	DefaultMaxRecordSize = 64 << 20
	// DefaultMaxWindow bounds the zstd window; the reference writes 2 MiB.
	DefaultMaxWindow = 32 << 20
)

// ReaderOptions sets a Reader's limits; zero values mean the defaults.
type ReaderOptions struct {
	MaxRecordSize int
	MaxWindow     uint64
	// Meter, when set, is charged before the reader allocates: the zstd
	// window and buffers when it opens, then each growth of its record
	// buffers. A refused charge fails the read with the meter's error.
	Meter interface{ Charge(n int64) error }
}

// readerOverhead is what a Reader holds besides its record buffers: the
// zstd decoder's history (its window, twice over at worst while a block is
// copied out) and its block buffers.
func readerOverhead(window uint64) int64 {
	return 2*int64(window) + 1<<20 + internMemory + slabBytes
}

// Next's small plaintexts come from slabs (see slabFor); what a Reader
// holds of them is the unused rest of one.
const slabBytes = 64 << 10

// ReaderMemory is the most a Reader under opts may charge its Meter: its
// overhead and its two record buffers (ciphertext and plaintext) at the
// largest record.
func ReaderMemory(opts ReaderOptions) int64 {
	return readerOverhead(opts.MaxWindow) + 2*int64(opts.MaxRecordSize)
}

// Reader reads an archive. NewReader reads and checks the header; Metadata
// reads record 0, which must be the metadata element; Next yields the
// elements after it and io.EOF at a complete end.
type Reader struct {
	aead    cipher.AEAD
	src     *sourceReader
	meter   interface{ Charge(n int64) error }
	zr      *zstd.Decoder
	version uint16
	base    Nonce
	next    Nonce       // the counter: the nonce the next record is tried under
	hand    handElement // NextShared's element, reused
	slab    []byte      // Next's plaintexts, carved from a slab
	strs    interner
	// The nonce being tried and the length prefix being read live here:
	// as locals they would escape to the heap once a record.
	nonce     Nonce
	prefix    [lengthSize]byte
	n         uint64
	maxRecord int
	buf       []byte // ciphertext, reused
	plain     []byte // NextShared's plaintext, reused
	meta      *ds.BackupMetadataSave
	stats     Stats
	err       error // sticky
}

// Stats counts what a Reader has read.
type Stats struct {
	// Records read, the metadata record included.
	Records uint64
	// Skipped: records whose element is unset, unknown or an event
	// (ARCH-005).
	Skipped uint64
	// Legacy: records that opened only under the legacy retry (ARCH-002).
	Legacy uint64
	// Record0Legacy: record 0 opened under the retry, which says the
	// archive was written in the legacy repeated-nonce form.
	Record0Legacy bool
}

// NewReader checks the key (ARCH-012: before reading any byte), reads the
// header, and rejects a later container version before any record
// (ARCH-003).
func NewReader(r io.Reader, key []byte, opts ReaderOptions) (*Reader, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	var header [HeaderSize]byte
	if n, err := io.ReadFull(r, header[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: header is %d of %d bytes", ErrTruncated, n, HeaderSize)
		}
		return nil, fmt.Errorf("archive: read header: %w", err)
	}
	version := binary.LittleEndian.Uint16(header[:2])
	if version > Version {
		return nil, &VersionError{Version: version}
	}
	if opts.MaxRecordSize <= 0 {
		opts.MaxRecordSize = DefaultMaxRecordSize
	}
	if opts.MaxWindow == 0 {
		opts.MaxWindow = DefaultMaxWindow
	}
	if opts.Meter != nil {
		if err := opts.Meter.Charge(readerOverhead(opts.MaxWindow)); err != nil {
			return nil, err
		}
	}
	src := &sourceReader{r: r}
	zr, err := zstd.NewReader(src,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(opts.MaxWindow),
		zstd.WithDecoderMaxMemory(uint64(opts.MaxRecordSize)+opts.MaxWindow+(1<<20)),
		zstd.WithDecoderLowmem(true),
	)
	if err != nil {
		return nil, fmt.Errorf("archive: zstd: %w", err)
	}
	rd := &Reader{aead: aead, src: src, meter: opts.Meter, zr: zr, version: version, maxRecord: opts.MaxRecordSize}
	copy(rd.base[:], header[2:])
	rd.next = rd.base
	return rd, nil
}

// Version is the header's container version.
func (r *Reader) Version() uint16 { return r.version }

// Stats reports what has been read so far.
func (r *Reader) Stats() Stats { return r.stats }

// Close releases the zstd decoder. It does not close the underlying reader.
func (r *Reader) Close() {
	r.zr.Close()
}

// Metadata reads record 0 and returns its metadata element; a record 0
// that is anything else fails (ARCH-006). Later calls return the same.
func (r *Reader) Metadata() (*ds.BackupMetadataSave, error) {
	if r.meta != nil || r.err != nil {
		return r.meta, r.err
	}
	el, err := r.record(false)
	if errors.Is(err, io.EOF) {
		// An archive needs its metadata: a stream with no records is
		// incomplete (ARCH-018).
		err = &RecordError{Record: 0, Err: fmt.Errorf("%w: the stream holds no records", ErrTruncated)}
	}
	if err != nil {
		return nil, r.fail(err)
	}
	meta := el.GetMetadata()
	if meta == nil {
		return nil, r.fail(&RecordError{Record: 0, Err: ErrNotMetadata})
	}
	r.meta = meta
	return meta, nil
}

// Next returns the next element after the metadata, skipping unset,
// unknown and event elements (ARCH-005). At the end of a complete zstd
// stream with no pending bytes it returns io.EOF (ARCH-018); any other
// failure is a *RecordError naming the record, and sticks. The element is
// the caller's to keep.
func (r *Reader) Next() (*ds.BackupElement, error) { return r.nextElement(false) }

// NextShared is Next for a caller that is done with each element before
// it reads the next (verifying, copying to another archive): the element
// and its bytes live in the Reader's buffers, reused by the next call to
// Next or NextShared, so that reading allocates nothing per record. Like
// bufio.Scanner's Bytes.
func (r *Reader) NextShared() (*ds.BackupElement, error) { return r.nextElement(true) }

func (r *Reader) nextElement(shared bool) (*ds.BackupElement, error) {
	if _, err := r.Metadata(); err != nil {
		return nil, err
	}
	for {
		el, err := r.record(shared)
		if err != nil {
			return nil, r.fail(err)
		}
		switch el.GetElement().(type) {
		case *ds.BackupElement_Group, *ds.BackupElement_GroupMessage, *ds.BackupElement_Consent, *ds.BackupElement_Metadata:
			return el, nil
		default:
			r.stats.Skipped++
		}
	}
}

// Record is the number of the record Next last returned (or failed at).
func (r *Reader) Record() uint64 {
	if r.n == 0 {
		return 0
	}
	return r.n - 1
}

// record reads, opens and parses the next record; shared, a message
// element reuses the Reader's buffers (see NextShared).
func (r *Reader) record(shared bool) (*ds.BackupElement, error) {
	num := r.n
	fail := func(err error) error { return &RecordError{Record: num, Err: err} }
	prefix := r.prefix[:]
	n, err := io.ReadFull(r.zr, prefix)
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		// A clean end: the zstd decoder reports EOF only after a complete
		// frame, so nothing is pending.
		return nil, io.EOF
	case n == 0 && errors.Is(err, io.ErrUnexpectedEOF) && (r.src == nil || r.src.err == nil):
		// Not one byte of the next prefix came out: the compressed stream
		// stops inside a block or before its frame ends, after the last
		// complete record. Say that, not that a prefix was cut.
		where := fmt.Sprintf("after record %d", int64(num)-1)
		if num == 0 {
			where = "before its first record is whole"
		}
		return nil, fail(fmt.Errorf("%w: the compressed stream is cut (inside a zstd block, or before its frame ends) %s", ErrTruncated, where))
	case err != nil:
		return nil, fail(r.streamError(err, fmt.Sprintf("length prefix (%d of %d bytes)", n, lengthSize)))
	}
	size := binary.LittleEndian.Uint32(prefix)
	if size < TagSize {
		return nil, fail(fmt.Errorf("%w: %d bytes, less than the %d-byte tag", ErrRecordSize, size, TagSize))
	}
	if uint64(size) > uint64(r.maxRecord) {
		return nil, fail(fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrRecordSize, size, r.maxRecord))
	}
	r.n++
	r.stats.Records++
	ct, err := r.readCiphertext(int(size))
	if err != nil {
		return nil, fail(err)
	}
	dst, fromSlab := r.plain[:0], false
	if !shared {
		dst, fromSlab = r.slabFor(len(ct) - TagSize)
	}
	plain, legacy, err := r.open(dst, ct)
	if err != nil {
		return nil, fail(err)
	}
	if shared {
		r.plain = plain
	}
	if legacy {
		r.stats.Legacy++
		if num == 0 {
			r.stats.Record0Legacy = true
		}
	}
	hand := &r.hand
	if !shared {
		// One allocation per element, never a slab of them: an element
		// points at its plaintext, so a slab kept alive by one element
		// would keep every other element's plaintext alive with it.
		hand = new(handElement)
	}
	el, aliased, err := parseElement(plain, hand, &r.strs)
	if err != nil {
		if field := wire.BadUTF8Field(plain, (&ds.BackupElement{}).ProtoReflect().Descriptor()); field != "" {
			err = fmt.Errorf("%s: not valid UTF-8", field)
		}
		return nil, fail(fmt.Errorf("%w: %v", ErrElement, err))
	}
	if aliased && !shared {
		// The element holds its plaintext now.
		if fromSlab {
			r.slab = r.slab[len(plain):]
		}
	}
	return el, nil
}

// readCiphertext reads size bytes into the reused buffer, growing it as
// the bytes arrive rather than trusting the length up front: a hostile
// length on a short stream costs what the stream holds.
func (r *Reader) readCiphertext(size int) ([]byte, error) {
	const step = 1 << 20
	buf := r.buf[:0]
	for len(buf) < size {
		chunk := min(size-len(buf), step)
		if cap(buf)-len(buf) < chunk {
			newCap := len(buf) + max(chunk, min(size-len(buf), 2*len(buf)))
			// The plaintext buffer grows to match: charge both.
			if err := r.charge(2 * int64(newCap-cap(buf))); err != nil {
				r.buf = buf
				return nil, err
			}
			grown := make([]byte, len(buf), newCap)
			copy(grown, buf)
			buf = grown
		}
		n, err := io.ReadFull(r.zr, buf[len(buf):len(buf)+chunk])
		buf = buf[:len(buf)+n]
		if err != nil {
			r.buf = buf
			return nil, r.streamError(err, fmt.Sprintf("ciphertext (%d of %d bytes)", len(buf), size))
		}
	}
	r.buf = buf
	return buf, nil
}

// open decrypts into dst under the counter nonce, then under the legacy
// retry, the nonce one less (ARCH-002); the counter continues from the
// nonce that succeeded. Never in place: a failed Open may clear its
// output, and the retry needs the ciphertext intact.
func (r *Reader) open(dst, ct []byte) (plain []byte, legacy bool, err error) {
	r.nonce = r.next
	if plain, err = r.aead.Open(dst, r.nonce[:], ct, nil); err == nil {
		r.next = r.next.Add(1)
		return plain, false, nil
	}
	r.nonce = r.next.Sub1()
	if plain, err = r.aead.Open(dst, r.nonce[:], ct, nil); err == nil {
		return plain, true, nil // r.next is the legacy nonce + 1 already
	}
	return nil, false, ErrAuthentication
}

// slabFor returns room for an element's plaintext of n bytes that outlives
// the record: the rest of the current slab, a new slab, or, for a record
// past a quarter of a slab, a buffer of its own (fromSlab false). Carving
// small plaintexts from slabs makes one allocation of many (the reader's
// cost was mostly allocating and clearing them one by one); a record's
// room is capped at n, so that nothing is written past it. A slab lives
// while any of its elements does: at most 64 KiB past what that element
// holds, and import, which keeps elements in record order, shares slabs.
func (r *Reader) slabFor(n int) (room []byte, fromSlab bool) {
	if n > slabBytes/4 {
		return make([]byte, 0, n), false
	}
	if len(r.slab) < n {
		r.slab = make([]byte, slabBytes)
	}
	return r.slab[:0:n], true
}

func (r *Reader) charge(n int64) error {
	if r.meter == nil || n <= 0 {
		return nil
	}
	return r.meter.Charge(n)
}

// sourceReader keeps the first error of the reader under the archive
// other than its end, so that a broken transport (a cancelled call, an
// idle timeout) is reported as itself, not as the invalid zstd stream the
// decoder sees it as.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && s.err == nil {
		s.err = err
	}
	return n, err
}

// ErrSource wraps an error of the reader the archive is read from.
var ErrSource = errors.New("archive: reading the source")

// streamError says what an error inside the zstd stream means: the
// source's own failure as itself; an early end a truncation; a decoder
// error an invalid stream (ARCH-018).
func (r *Reader) streamError(err error, what string) error {
	if r.src != nil && r.src.err != nil {
		return fmt.Errorf("%w inside a %s: %w", ErrSource, what, r.src.err)
	}
	return streamError(err, what)
}

func streamError(err error, what string) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the stream ends inside a %s", ErrTruncated, what)
	default:
		return fmt.Errorf("%w: in a %s: %v", ErrCompression, what, err)
	}
}

func (r *Reader) fail(err error) error {
	if r.err == nil {
		r.err = err
	}
	return r.err
}
