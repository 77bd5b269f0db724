package codec

import (
	"bytes"
	"fmt"
	"io"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// MaxDecompressedSize is the CTYPE-025 limit on decompressed content.
const MaxDecompressedSize = 16 << 20 // 16777216

// errTooLarge is returned when output would pass the limit.
type errTooLarge struct{ limit int64 }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("decompressed content exceeds %d bytes", e.limit)
}

// Compress compresses content in the form CTYPE-023 requires: zlib for
// COMPRESSION_DEFLATE and gzip for COMPRESSION_GZIP.
func Compress(content []byte, alg mc.Compression) ([]byte, error) {
	var buf bytes.Buffer
	var w io.WriteCloser
	switch alg {
	case mc.Compression_COMPRESSION_DEFLATE:
		w = zlib.NewWriter(&buf)
	case mc.Compression_COMPRESSION_GZIP:
		w = gzip.NewWriter(&buf)
	default:
		return nil, encodeError("compression", "unknown compression %d", int32(alg))
	}
	if _, err := w.Write(content); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	return buf.Bytes(), nil
}

// Decompress undoes compression as CTYPE-024 reads it: gzip for
// COMPRESSION_GZIP; zlib for COMPRESSION_DEFLATE and, when zlib fails, raw
// DEFLATE. Output is capped at limit bytes (CTYPE-025): memory never grows
// past limit+1 however the input expands. Every failure is a decode failure.
func Decompress(content []byte, alg mc.Compression, limit int64) ([]byte, error) {
	return decompress(content, alg, limit, nil)
}

// decompress is Decompress calling charge (when set) with the size of each
// chunk of output before it is allocated; an error from charge stops it.
func decompress(content []byte, alg mc.Compression, limit int64, charge func(int64) error) ([]byte, error) {
	switch alg {
	case mc.Compression_COMPRESSION_GZIP:
		zr, err := gzip.NewReader(bytes.NewReader(content))
		if err != nil {
			return nil, decodeError("compression", "gzip: %v", err)
		}
		out, err := readLimited(zr, limit, charge)
		if err != nil {
			return nil, decodeError("compression", "gzip: %v", err)
		}
		return out, nil
	case mc.Compression_COMPRESSION_DEFLATE:
		out, zerr := inflateZlib(content, limit, charge)
		if zerr == nil {
			return out, nil
		}
		if _, ok := zerr.(errTooLarge); ok {
			return nil, decodeError("compression", "zlib: %v", zerr)
		}
		out, rerr := readLimited(flate.NewReader(bytes.NewReader(content)), limit, charge)
		if rerr != nil {
			return nil, decodeError("compression", "neither zlib (%v) nor raw deflate (%v)", zerr, rerr)
		}
		return out, nil
	default:
		return nil, decodeError("compression", "unknown compression %d", int32(alg))
	}
}

func inflateZlib(content []byte, limit int64, charge func(int64) error) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(content))
	if err != nil {
		return nil, err
	}
	return readLimited(zr, limit, charge)
}

// readLimited reads r to its end, failing as soon as more than limit bytes
// come out, and surfacing any error the decompressor reports at the end
// (a bad checksum, a truncated stream). It reads into chunks that grow to
// 1 MiB and joins them once at the end, so a stream cut off at the limit
// costs about the limit in memory, and a complete one about twice its size,
// rather than the sum of a doubling buffer's copies.
func readLimited(r io.Reader, limit int64, charge func(int64) error) ([]byte, error) {
	if limit < 0 {
		limit = 0
	}
	lr := io.LimitReader(r, limit+1)
	var chunks [][]byte
	var total int64
	size := 4 << 10
	for {
		// Never allocate past what the limit still allows (plus the one
		// byte that shows it was passed).
		size = int(min(int64(size), limit+1-total))
		if charge != nil {
			if err := charge(int64(size)); err != nil {
				return nil, err
			}
		}
		buf := make([]byte, size)
		n, err := io.ReadFull(lr, buf)
		total += int64(n)
		if n > 0 {
			chunks = append(chunks, buf[:n])
		}
		if total > limit {
			return nil, errTooLarge{limit}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(2*size, 1<<20)
	}
	if c, ok := r.(io.Closer); ok {
		if err := c.Close(); err != nil {
			return nil, err
		}
	}
	switch len(chunks) {
	case 0:
		return []byte{}, nil
	case 1:
		return chunks[0], nil
	}
	// The chunks and their join are alive together while it copies.
	if charge != nil {
		if err := charge(total); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out, nil
}
