package archive

import (
	"errors"
	"fmt"
	"io"
)

// rawFrameWriter writes one zstd frame (RFC 8878 section 3.1.1) of raw
// blocks: the bytes as they are, in blocks of at most 32 KiB, each behind
// a 3-byte block header. The archive's stream is ciphertext, which no
// compressor can shrink (the specification says as much); a real encoder
// spent a third of an export's CPU searching it for matches and then
// stored it raw anyway. Every zstd decoder reads raw blocks.
//
// The frame header declares no content size, no checksum and no
// dictionary, and a 32 KiB window: raw blocks refer to nothing before
// them, so the window only bounds the block size a decoder must accept.
type rawFrameWriter struct {
	w      io.Writer
	block  []byte // the block being filled; written when full
	err    error
	closed bool
}

const (
	// rawBlockMax is the block size: a decoder hands on a block's bytes
	// only once the block is whole, so an archive cut short loses up to a
	// block of the records before the cut, and a smaller window costs a
	// reader less memory; 3 bytes of header per 32 KiB cost nothing.
	rawBlockMax = 32 << 10
	// rawFrameHeader: the magic number; a descriptor with every flag clear
	// (so a window descriptor follows); the window descriptor for 2^15
	// bytes (exponent 5, mantissa 0), the block size.
	rawFrameHeader = "\x28\xb5\x2f\xfd\x00\x28"
	blockTypeRaw   = 0
)

func newRawFrameWriter(w io.Writer) (*rawFrameWriter, error) {
	if _, err := io.WriteString(w, rawFrameHeader); err != nil {
		return nil, fmt.Errorf("zstd frame header: %w", err)
	}
	return &rawFrameWriter{w: w, block: make([]byte, blockHeaderSize, blockHeaderSize+rawBlockMax)}, nil
}

const blockHeaderSize = 3

// Write adds p to the frame, writing every block it fills.
func (f *rawFrameWriter) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if err := f.fill(append(f.block, p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// room is the block being filled, for a caller to append to in place and
// hand back to fill: the archive Writer builds each record there, saving a
// copy of every byte.
func (f *rawFrameWriter) room() []byte { return f.block }

// fill takes the block back with bytes appended (past the block size, or
// in a reallocated buffer, as append left it) and writes each full block,
// moving what is left to the front.
func (f *rawFrameWriter) fill(block []byte) error {
	f.block = block
	for len(f.block)-blockHeaderSize >= rawBlockMax {
		if err := f.writeBlock(f.block[:blockHeaderSize+rawBlockMax], false); err != nil {
			return err
		}
		rest := copy(f.block[blockHeaderSize:], f.block[blockHeaderSize+rawBlockMax:])
		f.block = f.block[:blockHeaderSize+rest]
	}
	return nil
}

// Close writes the last block, which ends the frame. It does not close
// the underlying writer.
func (f *rawFrameWriter) Close() error {
	if f.closed {
		return f.err
	}
	f.closed = true
	if f.err != nil {
		return f.err
	}
	if err := f.writeBlock(f.block, true); err != nil {
		return err
	}
	f.err = errors.New("zstd frame: write after close")
	return nil
}

// writeBlock writes block, its first bytes room for its header.
func (f *rawFrameWriter) writeBlock(block []byte, last bool) error {
	header := uint32(len(block)-blockHeaderSize)<<3 | blockTypeRaw<<1
	if last {
		header |= 1
	}
	block[0], block[1], block[2] = byte(header), byte(header>>8), byte(header>>16)
	if _, err := f.w.Write(block); err != nil {
		f.err = fmt.Errorf("zstd frame: %w", err)
		return f.err
	}
	return nil
}
