package server

import (
	"context"
	"sync"

	"google.golang.org/grpc/stats"

	"github.com/contentbackup/contentbackup/internal/budget"
)

// A call's budget must outlive its handler: gRPC marshals and sends the
// response after the handler returns, and the response holds what the
// budget paid for. rpcBudgets, put in every call's context by the stats
// handler, closes the call's budgets when gRPC reports the call ended,
// after the response has gone.
type rpcBudgets struct {
	mu    sync.Mutex
	calls []*budget.Call
	ended bool
}

type rpcBudgetsKey struct{}

// budgetStats is the grpc.StatsHandler that keeps rpcBudgets.
type budgetStats struct{}

func (budgetStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, rpcBudgetsKey{}, &rpcBudgets{})
}

func (budgetStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
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

func (budgetStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (budgetStats) HandleConn(context.Context, stats.ConnStats)                       {}

// callBudget starts a budget for this call, closed when the call ends (or,
// outside a gRPC call, by the returned done, which the handler defers;
// inside one done does nothing).
func callBudget(ctx context.Context, pool *budget.Pool, what string, limit int64) (c *budget.Call, done func()) {
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
