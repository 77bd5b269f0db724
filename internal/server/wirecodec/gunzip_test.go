package wirecodec

import (
	"bytes"
	"compress/gzip"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/budget"
)

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGunzipHandsItsRefusalsToTheCodec: the decompressor charges the
// memory budget before it inflates, holds the charge until the codec has
// parsed the message, and hands each refusal (no room, past the message
// limit, not gzip) to the codec, whose Malformed returns it once as the
// caller's status; a request inflated within bounds parses as sent.
func TestGunzipHandsItsRefusalsToTheCodec(t *testing.T) {
	req := &cb.DecodeRequest{EncodedContent: bytes.Repeat([]byte{'a'}, 100<<10)}
	raw, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(g *Gunzip, body []byte) (*cb.DecodeRequest, error) {
		t.Helper()
		out, err := g.Do(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err) // refusals travel as markers, never as errors
		}
		c := NewCodec(g)
		got := &cb.DecodeRequest{}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(out)}, got); err != nil {
			t.Fatal(err)
		}
		err = c.Malformed(got)
		if again := c.Malformed(got); again != nil {
			t.Errorf("a refusal taken back twice: %v", again)
		}
		return got, err
	}

	pool := budget.NewPool(64 << 20)
	got, err := decode(NewGunzip(pool, 1<<20), gz(t, raw))
	if err != nil || !proto.Equal(got, req) {
		t.Fatalf("a request within bounds: %v", err)
	}
	if pool.Held() != 0 {
		t.Errorf("after parsing: %d bytes of the budget held", pool.Held())
	}
	for _, tc := range []struct {
		name string
		g    *Gunzip
		body []byte
		code codes.Code
	}{
		{"no room in the budget", NewGunzip(budget.NewPool(16<<10), 1<<20), gz(t, raw), codes.ResourceExhausted},
		{"past the message limit", NewGunzip(pool, 10<<10), gz(t, raw), codes.ResourceExhausted},
		{"not gzip", NewGunzip(pool, 1<<20), raw, codes.InvalidArgument},
	} {
		if _, err := decode(tc.g, tc.body); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if pool.Held() != 0 {
		t.Errorf("after the refusals: %d bytes of the budget held", pool.Held())
	}
}
