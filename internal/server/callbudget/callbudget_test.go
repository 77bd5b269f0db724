package callbudget

import (
	"context"
	"testing"

	"google.golang.org/grpc/stats"

	"github.com/contentbackup/contentbackup/internal/budget"
)

// TestBudgetsLiveAsLongAsTheCall: inside a gRPC call a budget outlives
// the handler (its done does nothing) and is given back when gRPC reports
// the call ended; a budget taken after that, or outside a call, is given
// back by done.
func TestBudgetsLiveAsLongAsTheCall(t *testing.T) {
	pool := budget.NewPool(1 << 20)
	ctx := Stats{}.TagRPC(context.Background(), &stats.RPCTagInfo{FullMethodName: "/s/m"})
	c, done := Start(ctx, pool, "decode", 1<<10)
	if err := c.Charge(512); err != nil {
		t.Fatal(err)
	}
	done() // the handler returns; the response is not sent yet
	if pool.Held() != 512 {
		t.Fatalf("after the handler: %d bytes held, want 512 until the call ends", pool.Held())
	}
	Stats{}.HandleRPC(ctx, &stats.End{})
	if pool.Held() != 0 {
		t.Errorf("after the call ended: %d bytes held", pool.Held())
	}
	late, done := Start(ctx, pool, "decode", 1<<10)
	if err := late.Charge(100); err != nil {
		t.Fatal(err)
	}
	done()
	if pool.Held() != 0 {
		t.Errorf("a budget taken after the end, its done called: %d bytes held", pool.Held())
	}
	outside, done := Start(context.Background(), pool, "decode", 1<<10)
	if err := outside.Charge(100); err != nil {
		t.Fatal(err)
	}
	done()
	if pool.Held() != 0 {
		t.Errorf("outside a call, done called: %d bytes held", pool.Held())
	}
}
