// Package callbudget ties a call's memory budgets (internal/budget) to
// the call's life at the gRPC edge. A budget must outlive its handler:
// gRPC marshals and sends the response after the handler returns, and the
// response holds what the budget paid for. Stats, the server's
// grpc.StatsHandler, puts a list in every call's context and closes the
// budgets Start took for the call when gRPC reports the call ended, after
// the response has gone.
package callbudget

import (
	"context"
	"sync"

	"google.golang.org/grpc/stats"

	"github.com/contentbackup/contentbackup/internal/budget"
)

// rpcBudgets are one call's budgets, closed when the call ends.
type rpcBudgets struct {
	mu    sync.Mutex
	calls []*budget.Call
	ended bool
}

type rpcBudgetsKey struct{}

// Stats is the grpc.StatsHandler that keeps each call's budgets.
type Stats struct{}

func (Stats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, rpcBudgetsKey{}, &rpcBudgets{})
}

func (Stats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); !ok {
		return
	}
	if b, ok := ctx.Value(rpcBudgetsKey{}).(*rpcBudgets); ok {
		b.mu.Lock()
		calls := b.calls
		b.calls, b.ended = nil, true
		b.mu.Unlock()
		for _, c := range calls {
			c.Close()
		}
	}
}

func (Stats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (Stats) HandleConn(context.Context, stats.ConnStats)                       {}

// Start starts a budget from pool for the call in ctx, closed when the
// call ends (or, outside a gRPC call, by the returned done, which the
// handler defers; inside one done does nothing).
func Start(ctx context.Context, pool *budget.Pool, what string, limit int64) (c *budget.Call, done func()) {
	c = pool.NewCall(what, limit)
	if b, ok := ctx.Value(rpcBudgetsKey{}).(*rpcBudgets); ok {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.ended {
			b.calls = append(b.calls, c)
			return c, func() {}
		}
	}
	return c, c.Close
}
