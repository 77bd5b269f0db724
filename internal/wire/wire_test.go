package wire

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// sameAsProtowire fails t unless each reader reads b as protowire does,
// and a value read is capped at its length.
func sameAsProtowire(t *testing.T, b []byte) {
	t.Helper()
	num, typ, n := ConsumeTag(b)
	wnum, wtyp, wn := protowire.ConsumeTag(b)
	if n != wn || (n > 0 && (num != wnum || typ != wtyp)) {
		t.Errorf("tag %x: %d %d %d; protowire %d %d %d", b, num, typ, n, wnum, wtyp, wn)
	}
	x, n := ConsumeVarint(b)
	wx, wn := protowire.ConsumeVarint(b)
	if n != wn || x != wx {
		t.Errorf("varint %x: %d %d; protowire %d %d", b, x, n, wx, wn)
	}
	v, n := ConsumeBytes(b)
	wv, wn := protowire.ConsumeBytes(b)
	if n != wn || !bytes.Equal(v, wv) {
		t.Errorf("bytes %x: %d bytes, n %d; protowire %d bytes, n %d", b, len(v), n, len(wv), wn)
	}
	if cap(v) != len(v) {
		t.Errorf("bytes %x: cap %d past the value's %d", b, cap(v), len(v))
	}
}

// TestConsumeMatchesProtowire: at the edges of each in-line form,
// overlong, and cut short.
func TestConsumeMatchesProtowire(t *testing.T) {
	body := bytes.Repeat([]byte{7}, 1<<15)
	for _, size := range []int{0, 1, 126, 127, 128, 129, 255, 256, 1000, 1024, 16383, 16384, 16385} {
		prefix := protowire.AppendVarint(nil, uint64(size))
		for _, extra := range []int{-1, 0, 3} { // cut short, exact, followed by more
			if size+extra >= 0 {
				sameAsProtowire(t, append(bytes.Clone(prefix), body[:size+extra]...))
			}
		}
	}
	for _, b := range [][]byte{{}, {0x00}, {0x08}, {0x7f}, {0x80}, {0x80, 0x00}, {0x82, 0x01}, {0x85, 0x00, 1, 2, 3, 4, 5},
		{0xff, 0xff, 0xff, 0xff, 0x0f}, {0x90, 0x01, 0x01}, bytes.Repeat([]byte{0xff}, 11)} {
		sameAsProtowire(t, b)
	}
}

// FuzzConsumeMatchesProtowire holds the readers to protowire on any bytes.
func FuzzConsumeMatchesProtowire(f *testing.F) {
	f.Add([]byte{0x0a, 0x01, 0x00})
	f.Add([]byte{0x80, 0x01})
	f.Add([]byte{0xff, 0x7f, 0x00})
	f.Add(append([]byte{0x80, 0x08}, bytes.Repeat([]byte{1}, 1024)...))
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProtowire(t, b) })
}

// TestAppendMatchesProtowire: every length and number form, at its edges.
func TestAppendMatchesProtowire(t *testing.T) {
	for _, n := range []int{0, 1, 1<<7 - 1, 1 << 7, 1<<14 - 1, 1 << 14, 1<<21 + 5, 1<<31 - 1} {
		if got, want := AppendLength([]byte{9}, n), protowire.AppendVarint([]byte{9}, uint64(n)); !bytes.Equal(got, want) {
			t.Errorf("length %d: %x, want %x", n, got, want)
		}
	}
	for _, v := range []uint64{0, 1, 1<<7 - 1, 1 << 7, 1<<64 - 1} {
		if got, want := AppendVarint([]byte{9}, v), protowire.AppendVarint([]byte{9}, v); !bytes.Equal(got, want) {
			t.Errorf("varint %d: %x, want %x", v, got, want)
		}
	}
}
