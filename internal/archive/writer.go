package archive

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
)

// Writer writes an archive. WriteElement each element, the metadata
// element first (ARCH-006), then Close, which ends the zstd stream; until
// Close returns nil the archive is not complete.
type Writer struct {
	aead   cipher.AEAD
	zw     *rawFrameWriter
	base   Nonce
	n      uint64 // records written
	nonce  Nonce  // the record's nonce: a local would escape once a record
	err    error  // sticky
	closed bool
}

// marshal is deterministic so that a given element always seals to the
// same bytes under a given nonce.
var marshal = proto.MarshalOptions{Deterministic: true}

// NewWriter writes the header, under a base nonce drawn from crypto/rand
// (ARCH-001), to w and returns a Writer for the records. A key that is not
// 32 bytes is rejected before anything is written (ARCH-012).
//
// It writes only counter archives: legacy ones (one nonce for every
// record) and chosen base nonces are for tests, which build them with
// package archivetest, outside this package's API.
func NewWriter(w io.Writer, key []byte) (*Writer, error) {
	var base Nonce
	if _, err := rand.Read(base[:]); err != nil {
		return nil, fmt.Errorf("archive: base nonce: %w", err)
	}
	return newWriter(w, key, base)
}

// newWriter is NewWriter under a given base nonce: the package's own tests
// pin one for fixed vectors.
func newWriter(w io.Writer, key []byte, base Nonce) (*Writer, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	var header [HeaderSize]byte
	binary.LittleEndian.PutUint16(header[:2], Version)
	copy(header[2:], base[:])
	if _, err := w.Write(header[:]); err != nil {
		return nil, fmt.Errorf("archive: write header: %w", err)
	}
	// One frame for the whole body (the reference reads only the first),
	// of raw blocks: see rawFrameWriter.
	zw, err := newRawFrameWriter(w)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return &Writer{aead: aead, zw: zw, base: base}, nil
}

// Records is how many records have been written.
func (w *Writer) Records() uint64 { return w.n }

// WriteElement seals el as the next record.
func (w *Writer) WriteElement(el *ds.BackupElement) error {
	if w.err != nil {
		return w.err
	}
	// The record is built in place at the end of the zstd block being
	// filled: a length prefix, then the element, sealed where it lies (GCM
	// allows it when the plaintext and the output start at the same byte),
	// then the tag.
	block := w.zw.room()
	start := len(block)
	block, err := appendElement(append(block, 0, 0, 0, 0), el)
	if err != nil {
		return w.fail(fmt.Errorf("archive: record %d: marshal: %w", w.n, err))
	}
	w.nonce = w.base.Add(w.n)
	size := len(block) - start - lengthSize + TagSize
	if uint64(size) > 1<<32-1 {
		return w.fail(fmt.Errorf("archive: record %d: %d bytes do not fit a 4-byte length", w.n, size))
	}
	binary.LittleEndian.PutUint32(block[start:], uint32(size))
	block = slices.Grow(block, TagSize) // room for the tag, so Seal stays in place
	plain := block[start+lengthSize:]
	sealed := w.aead.Seal(plain[:0], w.nonce[:], plain, nil)
	if err := w.zw.fill(block[:start+lengthSize+len(sealed)]); err != nil {
		return w.fail(fmt.Errorf("archive: record %d: %w", w.n, err))
	}
	w.n++
	return nil
}

// Close ends the zstd stream. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	if w.err != nil {
		return w.err
	}
	w.closed = true
	if err := w.zw.Close(); err != nil {
		return w.fail(fmt.Errorf("archive: finish zstd stream: %w", err))
	}
	w.err = errors.New("archive: write after close")
	return nil
}

func (w *Writer) fail(err error) error {
	w.err = err
	return err
}
