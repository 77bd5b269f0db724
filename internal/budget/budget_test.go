package budget

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestChargeRefusesPastEitherLimit(t *testing.T) {
	p := NewPool(100)
	a := p.NewCall("decode", 60)
	if err := a.Charge(50); err != nil {
		t.Fatal(err)
	}
	var ee *ExceededError
	if err := a.Charge(11); !errors.As(err, &ee) || ee.Limit != "per-call decode" || ee.Bytes != 60 {
		t.Errorf("past the call's limit: %v", err)
	}
	b := p.NewCall("decode", 60)
	if err := b.Charge(51); !errors.As(err, &ee) || ee.Limit != "server memory" || ee.Bytes != 100 {
		t.Errorf("past the pool: %v", err)
	}
	a.Close()
	if err := b.Charge(51); err != nil {
		t.Errorf("after the first call closed: %v", err)
	}
	if a.Used() != 0 || b.Used() != 51 {
		t.Errorf("used %d %d", a.Used(), b.Used())
	}
}

func TestWaitBlocksUntilReleased(t *testing.T) {
	p := NewPool(1000)
	c := p.NewCall("import read-ahead", 100)
	if err := c.Wait(t.Context(), 80); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait(t.Context(), 50) }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned before bytes were released: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.Release(80)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(t.Context(), 101); err == nil {
		t.Error("a charge larger than the whole limit waited")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := c.Wait(ctx, 60); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait past the deadline: %v", err)
	}
	if c.Used() != 50 {
		t.Errorf("a failed wait kept its reservation: %d", c.Used())
	}
	// The pool is not waited for.
	other := p.NewCall("x", 1000)
	if err := other.Charge(950); err != nil {
		t.Fatal(err)
	}
	var ee *ExceededError
	if err := c.Wait(t.Context(), 50); !errors.As(err, &ee) || ee.Limit != "server memory" {
		t.Errorf("a wait on a short pool: %v", err)
	}
}

// TestPoolHeldCountsWhatCallsHold: Held follows charges and releases,
// waits included, and a refused charge holds nothing.
func TestPoolHeldCountsWhatCallsHold(t *testing.T) {
	p := NewPool(100)
	a, b := p.NewCall("a", 100), p.NewCall("b", 100)
	if err := a.Charge(30); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(t.Context(), 50); err != nil {
		t.Fatal(err)
	}
	if err := b.Charge(40); err == nil {
		t.Fatal("a charge past the pool was taken")
	}
	if got := p.Held(); got != 80 {
		t.Errorf("held %d; want 80", got)
	}
	a.Release(10)
	b.Close()
	if got := p.Held(); got != 20 {
		t.Errorf("held %d after releases; want 20", got)
	}
	a.Close()
	if got := p.Held(); got != 0 {
		t.Errorf("held %d after every call closed", got)
	}
}
