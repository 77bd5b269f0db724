package requestid

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"
)

// TestWith: a caller's plain id is kept; anything that could forge or
// break a log line is replaced by a fresh random one; an id already given
// (by the tap handle) is the call's for good.
func TestWith(t *testing.T) {
	for sent, keep := range map[string]bool{
		"client-trace.42":        true,
		"bad id\"}":              false,
		"":                       false,
		string(make([]byte, 65)): false,
		"a\nfake: log line":      false,
		"0123456789012345678901234567890123456789012345678901234567890123": true,
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(Header, sent))
		ctx, id := With(ctx)
		if keep != (id == sent) || len(id) == 0 {
			t.Errorf("sent %q: id %q", sent, id)
		}
		if FromContext(ctx) != id {
			t.Errorf("FromContext = %q, want %q", FromContext(ctx), id)
		}
		if _, again := With(ctx); again != id {
			t.Errorf("a second With gave %q, not the call's %q", again, id)
		}
	}
	if FromContext(context.Background()) != "" {
		t.Error("an id in a context never given one")
	}
}
