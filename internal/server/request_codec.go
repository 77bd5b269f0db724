package server

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

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

func (c *requestCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

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
