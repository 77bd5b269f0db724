// Package requestid gives every call a request id: the caller's own when it
// sent a plain one in x-request-id, a new random one otherwise. The server
// returns it in the response headers of every call and puts it in every
// log line of the call, so a client's trace can be followed into the logs.
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/grpc/metadata"
)

// Header carries a call's request id: the server returns it in
// the response headers of every call, and takes a caller's own when it is
// a plain token (so a client's trace can be followed into our logs).
const Header = "x-request-id"

type key struct{}

// With gives the call its request id: the caller's when it sent
// one of up to 64 letters, digits, '-', '_' or '.', a new random one
// otherwise (anything else could forge or break log lines).
func With(ctx context.Context) (context.Context, string) {
	if id, ok := ctx.Value(key{}).(string); ok {
		return ctx, id // given by the tap handle, on this call's headers
	}
	id := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(Header); len(v) == 1 && plainToken(v[0]) {
			id = v[0]
		}
	}
	if id == "" {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	return context.WithValue(ctx, key{}, id), id
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

// FromContext is the call's request id, or "".
func FromContext(ctx context.Context) string {
	id, _ := ctx.Value(key{}).(string)
	return id
}
