package jobs

import (
	"context"
	"errors"
	"testing"
)

// One owner's flood holds at most its share; another owner's job takes
// a free slot at once, and freed slots go to the owners in turn.
func TestSlotsAreFairAcrossOwners(t *testing.T) {
	s := newSlots(4, 2, 8)
	var alice []*ticket
	for range 6 {
		tk, err := s.take("alice")
		if err != nil {
			t.Fatal(err)
		}
		alice = append(alice, tk)
	}
	if !granted(alice[0]) || !granted(alice[1]) || granted(alice[2]) {
		t.Fatal("alice runs more or less than her share of 2")
	}
	bob, err := s.take("bob")
	if err != nil || !granted(bob) {
		t.Fatalf("bob waits behind alice's flood: %v", err)
	}
	carol1, _ := s.take("carol")
	carol2, _ := s.take("carol")
	carol3, _ := s.take("carol") // 4 slots: alice 2, bob 1, carol 1
	if !granted(carol1) || granted(carol2) || granted(carol3) {
		t.Fatal("carol should have the last free slot, then wait")
	}
	// alice ends a job: her queue and carol's take turns.
	s.giveUp(alice[0])
	if !granted(alice[2]) {
		t.Fatal("alice's freed slot should go to her queue, under her share")
	}
	s.giveUp(bob)
	if !granted(carol2) || granted(alice[3]) {
		t.Fatal("bob's slot should go to carol (her turn), not alice (at her share)")
	}
	if got := s.queued(); got != 4 { // alice 3, carol 1
		t.Fatalf("queued = %d, want 4", got)
	}
}

// The per-owner queue is bounded; a withdrawn ticket gives up its place.
func TestSlotsQueueBoundAndWithdraw(t *testing.T) {
	s := newSlots(1, 1, 2)
	first, _ := s.take("alice")
	w1, err1 := s.take("alice")
	_, err2 := s.take("alice")
	if _, err3 := s.take("alice"); !errors.Is(err3, ErrQueueFull) || err1 != nil || err2 != nil {
		t.Fatalf("queue bound: %v %v %v", err1, err2, err3)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.wait(ctx, w1); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait after cancel: %v", err)
	}
	if _, err := s.take("alice"); err != nil {
		t.Fatalf("a withdrawn ticket kept its place: %v", err)
	}
	s.giveUp(first)
	if s.queued() != 1 {
		t.Fatalf("queued = %d, want 1 after a grant", s.queued())
	}
}

// A ticket given up twice, or granted as its wait was cancelled, gives
// its slot back once: the slots never outnumber the server's.
func TestSlotsGiveUpOnce(t *testing.T) {
	s := newSlots(1, 1, 2)
	first, _ := s.take("alice")
	second, _ := s.take("alice")
	s.giveUp(first) // grants second
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.wait(ctx, second); err != nil {
		t.Fatalf("wait of a ticket granted as it was cancelled: %v, want it held", err)
	}
	s.giveUp(second)
	s.giveUp(second)
	s.giveUp(first)
	if s.free != 1 {
		t.Fatalf("free slots = %d, want 1", s.free)
	}
	a, _ := s.take("bob")
	b, _ := s.take("carol")
	if !granted(a) || granted(b) {
		t.Fatal("one slot must grant exactly one ticket")
	}
}
