package wirecodec

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"unsafe"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/contentbackup/contentbackup/internal/budget"
)

// Gunzip is the native gRPC listener's gzip decompressor (grpc-go
// prefers a server's own, set with grpc.RPCDecompressor, over the one
// registered process-wide). A proven caller's compressed request is
// inflated by grpc-go before any interceptor runs, up to the message
// limit; the registered decompressor charges nothing for it, so a few
// hundred concurrent 32 MiB inflations could take the process past its
// memory budget. This one charges the server-wide budget for every
// buffer before allocating it.
//
// grpc-go gives neither the decompressor nor the codec the call, and
// turns a decompressor's error into INTERNAL. So the two cooperate
// through the output: the charge is handed to the codec with the bytes
// and released once the message is parsed (or, should grpc-go drop the
// bytes unparsed, when they are collected); and a refusal (no room in
// the budget, past the message limit, not gzip) is returned as a
// one-byte marker that the codec records against the message as the
// refusal's own status, which the authorizer returns before anything
// reads the message.
type Gunzip struct {
	pool  *budget.Pool
	limit int64 // the message limit, in decompressed bytes

	held sync.Map // uintptr (the output's first byte) → *budget.Call or *status.Status
}

func NewGunzip(pool *budget.Pool, limit int64) *Gunzip {
	return &Gunzip{pool: pool, limit: limit}
}

func (*Gunzip) Type() string { return "gzip" }

// gunzipFirstBuffer is the first buffer an inflation allocates; each next
// one doubles it.
const gunzipFirstBuffer = 32 << 10

// Do inflates r whole, charging the budget for each buffer before it is
// allocated. The charges of buffers outgrown are released once copied:
// at any moment the charge covers what is live.
func (g *Gunzip) Do(r io.Reader) ([]byte, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return g.refuse(status.New(codes.InvalidArgument, "the request is marked gzip but is not a gzip stream")), nil
	}
	// A buffer is at most twice the limit: the old and new buffers of a
	// growth are both live while copied.
	call := g.pool.NewCall("decompressed request", 3*g.limit+gunzipFirstBuffer)
	var out []byte
	for {
		if len(out) == cap(out) {
			next := int64(max(2*cap(out), gunzipFirstBuffer))
			if err := call.Charge(next); err != nil {
				call.Close()
				var exceeded *budget.ExceededError
				msg := "the request could not be decompressed"
				if errors.As(err, &exceeded) {
					msg = fmt.Sprintf("decompressing the request: the %s budget of %d bytes has no room now; retry, or send it uncompressed", exceeded.Limit, exceeded.Bytes)
				}
				return g.refuse(status.New(codes.ResourceExhausted, msg)), nil
			}
			grown := make([]byte, len(out), next)
			copy(grown, out)
			call.Release(int64(cap(out)))
			out = grown
		}
		n, rerr := zr.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if int64(len(out)) > g.limit {
			call.Close()
			return g.refuse(status.Newf(codes.ResourceExhausted, "the request decompresses past the message limit of %d bytes", g.limit)), nil
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			call.Close()
			return g.refuse(status.New(codes.InvalidArgument, "the request's gzip stream is corrupt or truncated")), nil
		}
	}
	g.hold(out, call)
	return out, nil
}

// refuse returns the marker standing for st.
func (g *Gunzip) refuse(st *status.Status) []byte {
	marker := make([]byte, 1)
	g.hold(marker, st)
	return marker
}

// hold files v under out's first byte, and drops it (releasing a charge)
// if out is collected before the codec claims it.
func (g *Gunzip) hold(out []byte, v any) {
	first := unsafe.SliceData(out[:1])
	key := uintptr(unsafe.Pointer(first))
	g.held.Store(key, v)
	runtime.AddCleanup(first, func(key uintptr) {
		if v, ok := g.held.LoadAndDelete(key); ok {
			if call, ok := v.(*budget.Call); ok {
				call.Close()
			}
		}
	}, key)
}

// claim takes what Do filed for data: its charge (to be released once
// parsed) or its refusal. Data Do did not make claims nothing.
func (g *Gunzip) claim(data mem.BufferSlice) (*budget.Call, *status.Status) {
	if g == nil || len(data) != 1 {
		return nil, nil
	}
	b := data[0].ReadOnlyData()
	if cap(b) == 0 {
		return nil, nil
	}
	v, ok := g.held.LoadAndDelete(uintptr(unsafe.Pointer(unsafe.SliceData(b[:1]))))
	if !ok {
		return nil, nil
	}
	switch v := v.(type) {
	case *budget.Call:
		return v, nil
	case *status.Status:
		return nil, v
	}
	return nil, nil
}
