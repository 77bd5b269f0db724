// Package archive reads and writes the archive container of the archive
// format specification, section 1: a 14-byte clear header (a little-endian
// uint16 version, 0, and a 12-byte base nonce), then one zstd stream of
// records, each a 4-byte little-endian ciphertext length and an
// AES-256-GCM ciphertext (tag included, no associated data) of one
// protobuf BackupElement. Record i is sealed under base + i mod 2^96, the
// nonce read as a little-endian integer (ARCH-001).
//
// Like archive/tar and compress/gzip, the package owns the bytes and the
// caller owns the I/O: a Writer over an io.Writer takes elements, a Reader
// over an io.Reader yields them, and neither knows about stores or
// services. Memory is bounded by the largest record, never by the archive.
package archive

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// Sizes fixed by the format.
const (
	// Version is the only container version this package reads and writes.
	Version    = 0
	HeaderSize = 2 + NonceSize
	KeySize    = 32
	NonceSize  = 12
	TagSize    = 16
	// lengthSize is the size of a record's length prefix.
	lengthSize = 4
)

// Errors callers tell apart with errors.Is or errors.As.
var (
	// ErrKeySize: the key is not 32 bytes (ARCH-012). Returned before any
	// archive byte is read or written.
	ErrKeySize = fault.New(fault.Invalid, "archive: key must be exactly 32 bytes")
	// ErrTruncated: the input ended inside the header, a length prefix or
	// a record, or inside the zstd stream (ARCH-018).
	ErrTruncated = fault.NewReason(fault.Invalid, fault.ReasonTruncated, "archive: truncated")
	// ErrAuthentication: a record opens under neither its counter nonce
	// nor the legacy retry (ARCH-002): a wrong key, or damage.
	ErrAuthentication = fault.NewReason(fault.Invalid, fault.ReasonAuthenticationFailed, "archive: record fails authentication under its nonce and the legacy retry")
	// ErrNotMetadata: record 0 is not a metadata element (ARCH-006).
	ErrNotMetadata = fault.NewReason(fault.Invalid, fault.ReasonMalformedArchive, "archive: record 0 is not a metadata element")
	// ErrRecordSize: a record length under the 16-byte tag or over the
	// reader's limit (ARCH-018).
	ErrRecordSize = fault.NewReason(fault.Invalid, fault.ReasonMalformedArchive, "archive: record length out of bounds")
	// ErrCompression: the zstd stream is invalid (ARCH-018).
	ErrCompression = fault.NewReason(fault.Invalid, fault.ReasonMalformedArchive, "archive: invalid zstd stream")
	// ErrElement: a record decrypts but is not a BackupElement.
	ErrElement = fault.NewReason(fault.Invalid, fault.ReasonMalformedArchive, "archive: record is not a BackupElement")
)

// VersionError is a header naming a container version this package does
// not read (ARCH-003).
type VersionError struct{ Version uint16 }

// FaultKind: an archive of a later version is the caller's to convert.
func (e *VersionError) FaultKind() fault.Kind { return fault.Invalid }

// FaultReason: the archive is too new for this reader.
func (e *VersionError) FaultReason() fault.Reason { return fault.ReasonUnsupportedVersion }

func (e *VersionError) Error() string {
	return fmt.Sprintf("archive: container version %d is later than %d, the only one this reader knows", e.Version, Version)
}

// RecordError is a failure at one record, numbered from 0.
type RecordError struct {
	Record uint64
	Err    error
}

func (e *RecordError) Error() string { return fmt.Sprintf("record %d: %v", e.Record, e.Err) }
func (e *RecordError) Unwrap() error { return e.Err }

// Nonce is a 12-byte GCM nonce, read as a little-endian integer.
type Nonce [NonceSize]byte

// Add returns n + k mod 2^96.
func (n Nonce) Add(k uint64) Nonce {
	carry := k
	for i := 0; i < NonceSize && carry != 0; i++ {
		sum := uint64(n[i]) + carry&0xff
		n[i] = byte(sum)
		carry = carry>>8 + sum>>8
	}
	return n
}

// Sub1 returns n - 1 mod 2^96.
func (n Nonce) Sub1() Nonce {
	for i := range NonceSize {
		n[i]--
		if n[i] != 0xff {
			break
		}
	}
	return n
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w, got %d", ErrKeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return cipher.NewGCM(block)
}

// ParseKey reads a key as it is kept in a file or a variable: 32 raw
// bytes, or 64 hex characters with surrounding whitespace. Its errors give
// the length, never the contents.
func ParseKey(b []byte) ([]byte, error) {
	if len(b) == KeySize {
		return b, nil
	}
	text := strings.TrimSpace(string(b))
	if len(text) == 2*KeySize {
		if k, err := hex.DecodeString(text); err == nil {
			return k, nil
		}
	}
	return nil, fmt.Errorf("holds %d bytes; a key is 32 raw bytes or 64 hex characters (ARCH-012)", len(b))
}
