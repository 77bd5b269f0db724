package jobs

import (
	"context"
	"fmt"
	"sync"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// ErrQueueFull: the owner already has as many jobs waiting as it may.
var ErrQueueFull = fault.NewReason(fault.Exhausted, fault.ReasonQueueFull, "the owner has as many jobs waiting for a slot as it may; retry when one has started")

// slots shares a server's job slots fairly among owners: an owner runs at
// most perOwner jobs at once, a job that finds no slot it may take waits
// in its owner's queue (at most queuePerOwner deep), and a freed slot goes
// to the owners' queues in turn, so one owner's flood never holds every
// slot nor delays another owner by more than one job's turn.
type slots struct {
	mu            sync.Mutex
	free          int
	perOwner      int
	queuePerOwner int
	running       map[string]int
	queues        map[string][]*ticket
	// ring is the owners with waiters, in the order they are served.
	ring []string
}

type ticket struct {
	owner   string
	granted chan struct{}
	done    bool // granted, or withdrawn
	over    bool // its slot given back, or its place withdrawn
}

func newSlots(total, perOwner, queuePerOwner int) *slots {
	return &slots{free: total, perOwner: perOwner, queuePerOwner: queuePerOwner,
		running: map[string]int{}, queues: map[string][]*ticket{}}
}

// take returns a ticket for owner: granted at once when a slot is free
// and the owner is under its share, else queued. A full queue is
// ErrQueueFull.
func (s *slots) take(owner string) (*ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &ticket{owner: owner, granted: make(chan struct{})}
	if s.free > 0 && s.running[owner] < s.perOwner && len(s.queues[owner]) == 0 {
		s.grant(t)
		return t, nil
	}
	if len(s.queues[owner]) >= s.queuePerOwner {
		return nil, fmt.Errorf("%d waiting: %w", s.queuePerOwner, ErrQueueFull)
	}
	if len(s.queues[owner]) == 0 {
		s.ring = append(s.ring, owner)
	}
	s.queues[owner] = append(s.queues[owner], t)
	return t, nil
}

func (s *slots) grant(t *ticket) {
	s.free--
	s.running[t.owner]++
	t.done = true
	close(t.granted)
}

// granted reports whether t holds a slot.
func granted(t *ticket) bool {
	select {
	case <-t.granted:
		return true
	default:
		return false
	}
}

// wait blocks until t is granted or ctx ends. A ticket granted as ctx
// ends counts as granted: its holder gives it back with giveUp.
func (s *slots) wait(ctx context.Context, t *ticket) error {
	select {
	case <-t.granted:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if granted(t) {
		return nil
	}
	s.withdrawLocked(t)
	return context.Cause(ctx)
}

// giveUp ends t: its slot goes back when it was granted, its place in
// the queue when not. A second call does nothing.
func (s *slots) giveUp(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case t.over:
	case granted(t):
		t.over = true
		s.releaseLocked(t.owner)
	default:
		s.withdrawLocked(t)
	}
}

// withdrawLocked takes a queued t out of its owner's queue.
func (s *slots) withdrawLocked(t *ticket) {
	t.done, t.over = true, true
	q := s.queues[t.owner]
	for i, w := range q {
		if w == t {
			s.queues[t.owner] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(s.queues[t.owner]) == 0 {
		s.dropFromRing(t.owner)
	}
}

func (s *slots) releaseLocked(owner string) {
	s.free++
	if s.running[owner]--; s.running[owner] == 0 {
		delete(s.running, owner)
	}
	s.dispatch()
}

// dispatch grants free slots to the queued owners in turn, skipping an
// owner at its share; an owner served goes to the ring's end.
func (s *slots) dispatch() {
	for s.free > 0 {
		served := false
		for i, owner := range s.ring {
			if s.running[owner] >= s.perOwner {
				continue
			}
			q := s.queues[owner]
			t := q[0]
			s.queues[owner] = q[1:]
			s.ring = append(s.ring[:i:i], s.ring[i+1:]...)
			if len(s.queues[owner]) > 0 {
				s.ring = append(s.ring, owner)
			} else {
				delete(s.queues, owner)
			}
			s.grant(t)
			served = true
			break
		}
		if !served {
			return
		}
	}
}

func (s *slots) dropFromRing(owner string) {
	delete(s.queues, owner)
	for i, o := range s.ring {
		if o == owner {
			s.ring = append(s.ring[:i:i], s.ring[i+1:]...)
			return
		}
	}
}

// queued is how many jobs wait for a slot.
func (s *slots) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += len(q)
	}
	return n
}
