package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/grpc/metadata"
)

// requestIDHeader carries a call's request id: the server returns it in
// the response headers of every call, and takes a caller's own when it is
// a plain token (so a client's trace can be followed into our logs).
const requestIDHeader = "x-request-id"

type requestIDKey struct{}

// withRequestID gives the call its request id: the caller's when it sent
// one of up to 64 letters, digits, '-', '_' or '.', a new random one
// otherwise (anything else could forge or break log lines).
func withRequestID(ctx context.Context) (context.Context, string) {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		return ctx, id // given by the tap handle, on this call's headers
	}
	id := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(requestIDHeader); len(v) == 1 && plainToken(v[0]) {
			id = v[0]
		}
	}
	if id == "" {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	return context.WithValue(ctx, requestIDKey{}, id), id
}

func plainToken(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// requestID is the call's request id, or "".
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
