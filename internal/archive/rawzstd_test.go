package archive

import (
	"bytes"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestRawFrameIsZstd: the raw frame writer's output is one zstd frame
// (RFC 8878) that a standard decoder reads back to the bytes written, for
// sizes around the block limit, and its blocks are raw, at most
// rawBlockMax, with the last-block flag on the last one only.
func TestRawFrameIsZstd(t *testing.T) {
	for _, writes := range [][]int{{}, {0}, {1}, {rawBlockMax}, {rawBlockMax + 1}, {7, rawBlockMax - 7, 3}, {300 << 10, 5, 200 << 10}} {
		var want, got bytes.Buffer
		f, err := newRawFrameWriter(&got)
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range writes {
			p := bytes.Repeat([]byte{byte(i + 1)}, n)
			want.Write(p)
			if k, err := f.Write(p); err != nil || k != n {
				t.Fatalf("%v: write %d: %d, %v", writes, n, k, err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		frame := got.Bytes()
		dec, err := zstd.NewReader(bytes.NewReader(frame), zstd.WithDecoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(dec)
		dec.Close()
		if err != nil || !bytes.Equal(out, want.Bytes()) {
			t.Fatalf("%v: decoded %d bytes, %v; want %d", writes, len(out), err, want.Len())
		}
		blocks := frame[len(rawFrameHeader):]
		for len(blocks) > 0 {
			h := uint32(blocks[0]) | uint32(blocks[1])<<8 | uint32(blocks[2])<<16
			last, typ, size := h&1 == 1, (h>>1)&3, int(h>>3)
			if typ != blockTypeRaw || size > rawBlockMax || len(blocks) < blockHeaderSize+size {
				t.Fatalf("%v: block type %d, size %d", writes, typ, size)
			}
			blocks = blocks[blockHeaderSize+size:]
			if last != (len(blocks) == 0) {
				t.Fatalf("%v: last-block flag %v with %d bytes after", writes, last, len(blocks))
			}
		}
	}
}
