package server

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"

	// Registers the "proto" codec this one wraps.
	_ "google.golang.org/grpc/encoding/proto"
)

// requestCodec is grpc-go's proto codec, except that a request that does
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
type requestCodec struct {
	proto encoding.CodecV2
	bad   sync.Map // message pointer → parse error
}

func newRequestCodec() *requestCodec {
	return &requestCodec{proto: encoding.GetCodecV2("proto")}
}

func (c *requestCodec) Name() string { return "proto" }

// Marshal is the proto codec's, but for an Export chunk, which goes out
// without a copy: its field header, then the chunk's own bytes. The proto
// codec would clear a pooled buffer of the chunk's size and copy the
// chunk into it, twice the bytes of every archive touched again.
func (c *requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	if hdr, chunk, ok := exportChunk(v); ok {
		return mem.BufferSlice{mem.SliceBuffer(hdr), mem.SliceBuffer(chunk)}, nil
	}
	return c.proto.Marshal(v)
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

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.proto.Unmarshal(data, v); err != nil {
		c.bad.Store(v, err)
	}
	return nil
}

// malformed returns, once, the parse error recorded for msg, as the
// status the caller gets.
func (c *requestCodec) malformed(msg any) error {
	if c == nil {
		return nil
	}
	err, ok := c.bad.LoadAndDelete(msg)
	if !ok {
		return nil
	}
	return status.Error(codes.InvalidArgument, clip("the request is not a valid protobuf message: "+err.(error).Error()))
}
