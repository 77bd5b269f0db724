// Package budget bounds the memory that requests make the server allocate.
// Every byte that expands (decompressed content, decoded values, records
// read ahead) is charged before it is allocated, twice: to the call's own
// budget and to one server-wide pool shared by every call, so neither one
// request nor many small ones can take the process past what it was given.
package budget

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// ExceededError is a charge refused: the limit it would have passed, named
// for the caller (an operator can find it in the limits table).
// FaultKind: a budget is a limit.
func (e *ExceededError) FaultKind() fault.Kind { return fault.Exhausted }

// FaultReason: a budget's refusal names its limit in the status.
func (e *ExceededError) FaultReason() fault.Reason { return fault.ReasonBudgetExceeded }

type ExceededError struct {
	// Limit names the limit: "per-call <what>" or "server memory".
	Limit string
	// Bytes is the limit's size.
	Bytes int64
	// Want is what the charge asked for.
	Want int64
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("%s budget of %d bytes exceeded (a further %d bytes were needed)", e.Limit, e.Bytes, e.Want)
}

// Pool is the server-wide budget.
type Pool struct {
	sem      *semaphore.Weighted
	capacity int64
	held     atomic.Int64
}

// Held is how many of the pool's bytes calls hold now.
func (p *Pool) Held() int64 { return p.held.Load() }

// NewPool returns a pool of capacity bytes.
func NewPool(capacity int64) *Pool {
	return &Pool{sem: semaphore.NewWeighted(capacity), capacity: capacity}
}

// Call is one request's budget: at most limit bytes at a time, each also
// held from the pool until released. Safe for concurrent use (an import's
// reader charges while its applier releases).
type Call struct {
	pool  *Pool
	what  string
	limit int64

	mu    sync.Mutex
	used  int64
	freed chan struct{} // closed and replaced whenever bytes are released
}

// NewCall starts a call's budget of limit bytes; what names it in errors
// ("per-call " + what). Close it when the call ends.
func (p *Pool) NewCall(what string, limit int64) *Call {
	return &Call{pool: p, what: what, limit: limit, freed: make(chan struct{})}
}

func (c *Call) exceeded(n int64) error {
	return &ExceededError{Limit: "per-call " + c.what, Bytes: c.limit, Want: n}
}

// Charge takes n bytes now or fails with an *ExceededError: for work that
// must not wait (decoding a request).
func (c *Call) Charge(n int64) error {
	if n <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used+n > c.limit {
		return c.exceeded(n)
	}
	if !c.pool.sem.TryAcquire(n) {
		return &ExceededError{Limit: "server memory", Bytes: c.pool.capacity, Want: n}
	}
	c.pool.held.Add(n)
	c.used += n
	return nil
}

// Wait takes n bytes, waiting while the call's own bytes are held (until
// Release frees enough) or until ctx is done: for a producer that should
// slow to its consumer's pace (import read-ahead). The pool is not waited
// for: when the server is short it fails at once, since callers waiting on
// each other's bytes could wait forever. n larger than the call's whole
// limit fails at once.
func (c *Call) Wait(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	if n > c.limit {
		return c.exceeded(n)
	}
	for {
		c.mu.Lock()
		if c.used+n <= c.limit {
			defer c.mu.Unlock()
			if !c.pool.sem.TryAcquire(n) {
				return &ExceededError{Limit: "server memory", Bytes: c.pool.capacity, Want: n}
			}
			c.pool.held.Add(n)
			c.used += n
			return nil
		}
		freed := c.freed
		c.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Release returns n bytes charged earlier.
func (c *Call) Release(n int64) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	if n > c.used {
		n = c.used
	}
	c.used -= n
	close(c.freed)
	c.freed = make(chan struct{})
	c.mu.Unlock()
	c.pool.held.Add(-n)
	c.pool.sem.Release(n)
}

// Used is what the call holds now.
func (c *Call) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Close returns everything the call still holds.
func (c *Call) Close() { c.Release(c.Used()) }
