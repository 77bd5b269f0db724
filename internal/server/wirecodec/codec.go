// Package wirecodec is the gRPC listener's codec and gzip decompressor:
// how a request's bytes become a message before any interceptor runs, and
// how responses are written.
//
// A compressed request is inflated under the server-wide memory budget
// (Gunzip), never past the message limit; a request that does not parse
// is recorded against its message rather than failed as grpc-go's
// INTERNAL, and the authorizer, the first interceptor of every call,
// takes the refusal back (Codec.Malformed) before anything reads the
// message. Responses are marshalled by the code vtprotobuf generated, an
// Export chunk without a copy.
package wirecodec

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/wire"

	// Registers the "proto" codec this one wraps.
	_ "google.golang.org/grpc/encoding/proto"
)

// Codec is grpc-go's proto codec, except that a request that does
// not parse (invalid UTF-8 in a string, nesting past protobuf's depth
// limit, a truncated field) is INVALID_ARGUMENT rather than the INTERNAL
// grpc-go makes of every decode failure, and reaches the interceptors, so
// it is logged and counted like any other bad request.
//
// grpc-go decodes a unary request before any interceptor runs and wraps a
// codec error as INTERNAL, so the codec cannot return the error itself: it
// records it against the message and reports success, and the authorizer,
// the first interceptor of every call and every received stream message,
// takes it back (malformed) before anything reads the message.
type Codec struct {
	proto encoding.CodecV2
	bad   sync.Map // message pointer → parse error, or *status.Status
	// inflated is the listener's gzip decompressor, whose charge for a
	// message the codec releases once it is parsed (see Gunzip).
	inflated *Gunzip
}

func NewCodec(inflated *Gunzip) *Codec {
	return &Codec{proto: encoding.GetCodecV2("proto"), inflated: inflated}
}

func (c *Codec) Name() string { return "proto" }

// Marshal writes a response. An Export chunk goes out without a copy: its
// field header, then the chunk's own bytes (the proto codec would clear a
// pooled buffer of the chunk's size and copy the chunk into it, twice the
// bytes of every archive touched again). Every other message of ours is
// marshalled by the code vtprotobuf generated for it, without protobuf's
// reflection, which was a sixth of a ListMessages call's CPU; anything
// else goes to the proto codec.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	if hdr, chunk, ok := exportChunk(v); ok {
		return mem.BufferSlice{mem.SliceBuffer(hdr), mem.SliceBuffer(chunk)}, nil
	}
	if m, ok := v.(vtMarshaler); ok {
		return marshalVT(m)
	}
	return c.proto.Marshal(v)
}

// vtMarshaler is what protoc-gen-go-vtproto generates (features
// marshal+size; never its unmarshal, which checks neither UTF-8 nor depth:
// requests are parsed by protobuf itself).
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT(dst []byte) (int, error)
}

// marshalVT is the proto codec's Marshal through the generated code: small
// messages into a buffer of their own, larger ones into one from grpc's
// pool, given back when the transport has written it.
func marshalVT(m vtMarshaler) (mem.BufferSlice, error) {
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// exportChunkField is ExportResponse's chunk, read from the descriptor.
var exportChunkField = (&cb.ExportResponse{}).ProtoReflect().Descriptor().Fields().ByName("chunk").Number()

// exportChunk returns the wire header and bytes of an ExportResponse that
// holds a chunk and nothing else: exactly what proto.Marshal writes.
func exportChunk(v any) (hdr, chunk []byte, ok bool) {
	r, isExport := v.(*cb.ExportResponse)
	if !isExport {
		return nil, nil, false
	}
	c, isChunk := r.GetPayload().(*cb.ExportResponse_Chunk)
	if !isChunk || len(r.ProtoReflect().GetUnknown()) != 0 {
		return nil, nil, false
	}
	hdr = protowire.AppendTag(make([]byte, 0, 8), exportChunkField, protowire.BytesType)
	return protowire.AppendVarint(hdr, uint64(len(c.Chunk))), c.Chunk, true
}

func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	charge, refused := c.inflated.claim(data)
	if refused != nil {
		c.bad.Store(v, refused)
		return nil
	}
	if charge != nil {
		defer charge.Close()
	}
	if err := c.proto.Unmarshal(data, v); err != nil {
		// Protobuf says a string is not UTF-8 without naming it: the
		// caller is told which field.
		if m, ok := v.(proto.Message); ok {
			if field := wire.BadUTF8Field(data.Materialize(), m.ProtoReflect().Descriptor()); field != "" {
				err = fmt.Errorf("%s: not valid UTF-8 (a string field holds UTF-8 text; bytes go in a bytes field)", field)
			}
		}
		c.bad.Store(v, err)
	}
	return nil
}

// Malformed returns, once, the parse error recorded for msg, as the
// status the caller gets.
func (c *Codec) Malformed(msg any) error {
	if c == nil {
		return nil
	}
	err, ok := c.bad.LoadAndDelete(msg)
	if !ok {
		return nil
	}
	if st, refused := err.(*status.Status); refused {
		return st.Err()
	}
	return status.Error(codes.InvalidArgument, fault.Clip("the request is not a valid protobuf message: "+err.(error).Error(), 1024, "… (truncated)"))
}
