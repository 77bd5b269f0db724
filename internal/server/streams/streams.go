// Package streams holds a stream's limits at the gRPC edge: how many
// streams of a kind are open at once, in all and per owner (Limiter), how
// long a client stream may send nothing (IdleRecv), and how far a server
// stream's sends may run ahead of the client (Sender), so that a slow or
// hostile client holds a bounded slot for a bounded time.
package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Limiter bounds the streams of one kind open at once: the archive
// streams (Export, Import, ReadMetadata, Verify) or the message streams
// (StreamMessages), in all and per owner (or, for streams that name none,
// per principal). A stream past either limit is refused with
// RESOURCE_EXHAUSTED at once rather than queued: a client that retries
// with backoff gets in as others finish, and a held-open hostile stream
// cannot make honest ones wait behind it.
type Limiter struct {
	kind                string // "archive", "message": named in refusals
	maxTotal, maxPerKey int

	mu    sync.Mutex
	total int
	byKey map[string]int
}

func NewLimiter(kind string, maxTotal, maxPerKey int) *Limiter {
	return &Limiter{kind: kind, maxTotal: maxTotal, maxPerKey: maxPerKey, byKey: map[string]int{}}
}

// Enter takes a server-wide slot; leave gives it back.
func (l *Limiter) Enter() (leave func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.maxTotal {
		return nil, status.Errorf(codes.ResourceExhausted, "%d %s streams are open, the server's limit; retry with backoff", l.maxTotal, l.kind)
	}
	l.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.total--
			l.mu.Unlock()
		})
	}, nil
}

// EnterKey takes one of key's slots; what names the key in the refusal
// ("owner", "principal") without repeating it.
func (l *Limiter) EnterKey(key, what string) (leave func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey[key] >= l.maxPerKey {
		return nil, status.Errorf(codes.ResourceExhausted, "%d %s streams are open for this %s, the limit per %s; retry with backoff", l.maxPerKey, l.kind, what, what)
	}
	l.byKey[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			if l.byKey[key]--; l.byKey[key] <= 0 {
				delete(l.byKey, key)
			}
			l.mu.Unlock()
		})
	}, nil
}

// EnterFor takes a server-wide slot and one of key's, or neither: what
// names the key in a refusal ("owner", "principal").
func (l *Limiter) EnterFor(key, what string) (leave func(), err error) {
	leaveAll, err := l.Enter()
	if err != nil {
		return nil, err
	}
	leaveKey, err := l.EnterKey(key, what)
	if err != nil {
		leaveAll()
		return nil, err
	}
	return func() { leaveKey(); leaveAll() }, nil
}

// IdleRecv wraps a client stream's recv so that a client that sends
// nothing for idle is cut off with DEADLINE_EXCEEDED, instead of holding
// its stream, its slot and its buffers for as long as it likes. recv runs
// in a goroutine of its own (the one place a blocked receive can be
// abandoned); it ends when the call does.
func IdleRecv[T any](ctx context.Context, recv func() (T, error), idle time.Duration) func() (T, error) {
	type result struct {
		m   T
		err error
	}
	ch := make(chan result)
	started := false
	start := func() {
		started = true
		go func() {
			for {
				m, err := recv()
				select {
				case ch <- result{m, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	return func() (T, error) {
		if !started {
			start()
		}
		t := time.NewTimer(idle)
		defer t.Stop()
		select {
		case r := <-ch:
			return r.m, r.err
		case <-t.C:
			var zero T
			return zero, status.Error(codes.DeadlineExceeded, fmt.Sprintf("the client sent nothing for %s, the stream idle timeout", idle))
		case <-ctx.Done():
			var zero T
			return zero, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// ErrStalled: the goroutine sending a server stream took nothing for the
// stream idle timeout; its client is not reading.
var ErrStalled = errors.New("the client read nothing for the stream idle timeout")

// HandOver gives v to a server stream's sending goroutine through ch,
// waiting at most idle for it to be taken: ErrStalled past that, the
// context's error if it ends first.
func HandOver[T any](ctx context.Context, ch chan<- T, v T, idle time.Duration) error {
	select {
	case ch <- v:
		return nil
	default:
	}
	t := time.NewTimer(idle)
	defer t.Stop()
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return ErrStalled
	}
}

// Sender sends a server stream's messages from a goroutine of its
// own, so that producing them (reading the store, building an archive)
// and sending overlap, at most `ahead` waiting between the two. A client
// that takes nothing for the idle timeout is a stalled client: Put
// returns ErrStalled, and the producer ends instead of holding what it
// reads (a database snapshot) open. A failed send cancels the producer's
// context: nobody is reading.
type Sender[T any] struct {
	ctx     context.Context
	queue   chan T
	sent    chan error
	idle    time.Duration
	stalled bool // under the producer alone
}

// StartSender starts the sending goroutine: send sends one value; done,
// when set, is called for each value taken, sent or not (to release what
// it holds).
func StartSender[T any](ctx context.Context, cancel context.CancelFunc, ahead int, idle time.Duration, send func(T) error, done func(T)) *Sender[T] {
	s := &Sender[T]{ctx: ctx, queue: make(chan T, ahead), sent: make(chan error, 1), idle: idle}
	go func() {
		var err error
		for v := range s.queue {
			if err == nil {
				if err = send(v); err != nil {
					cancel()
				}
			}
			if done != nil {
				done(v)
			}
		}
		s.sent <- err
	}()
	return s
}

// Put hands v to the sender, waiting at most the idle timeout.
func (s *Sender[T]) Put(v T) error {
	err := HandOver(s.ctx, s.queue, v, s.idle)
	if errors.Is(err, ErrStalled) {
		s.stalled = true
	}
	return err
}

// Stalled reports that the client stalled: a Put returned ErrStalled.
func (s *Sender[T]) Stalled() bool { return s.stalled }

// Finish ends the queue. A stalled client's call ends at once with
// DEADLINE_EXCEEDED (the sender, blocked on it, ends with the call);
// otherwise Finish waits for the sender and returns its error.
func (s *Sender[T]) Finish() error {
	close(s.queue)
	if s.stalled {
		return status.Errorf(codes.DeadlineExceeded, "the client read nothing for %s, the stream idle timeout", s.idle)
	}
	return <-s.sent
}
