package streams

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLimiterBoundsInAllAndPerKey: past the server's streams or one key's
// a stream is refused RESOURCE_EXHAUSTED at once, naming the limit and
// not the key; leaving gives a slot back, once however often it is called.
func TestLimiterBoundsInAllAndPerKey(t *testing.T) {
	l := NewLimiter("archive", 3, 2)
	a1, err := l.EnterFor("alice", "owner")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.EnterFor("alice", "owner"); err != nil {
		t.Fatal(err)
	}
	_, err = l.EnterFor("alice", "owner")
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "2 archive streams are open for this owner, the limit per owner; retry with backoff" {
		t.Errorf("alice's third stream: %v", err)
	}
	if _, err := l.EnterFor("bob", "owner"); err != nil {
		t.Errorf("bob's first stream while alice holds two: %v", err)
	}
	if _, err := l.EnterFor("carol", "owner"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a fourth stream on a server of three: %v", err)
	}
	a1()
	a1() // leaving twice gives back one slot
	if _, err := l.EnterFor("carol", "owner"); err != nil {
		t.Errorf("carol once alice left one: %v", err)
	}
	if _, err := l.EnterFor("dave", "owner"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a second leave gave back a second slot: %v", err)
	}
}

// TestIdleRecvCutsOffASilentClient: a client that sends nothing for the
// idle timeout gets DEADLINE_EXCEEDED; one that sends keeps its stream.
func TestIdleRecvCutsOffASilentClient(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sent := make(chan int, 1)
	recv := IdleRecv(ctx, func() (int, error) {
		v, ok := <-sent
		if !ok {
			return 0, errors.New("closed")
		}
		return v, nil
	}, 50*time.Millisecond)
	sent <- 7
	if v, err := recv(); v != 7 || err != nil {
		t.Fatalf("a message: %d %v", v, err)
	}
	if _, err := recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a silent client: %v, want DEADLINE_EXCEEDED", err)
	}
}

// TestSenderStopsForAStalledClient: a client that takes nothing for the
// idle timeout stalls the sender: Put returns ErrStalled instead of
// blocking the producer, and Stalled says so.
func TestSenderStopsForAStalledClient(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	block := make(chan struct{})
	defer close(block)
	s := StartSender(ctx, cancel, 1, 50*time.Millisecond, func(int) error { <-block; return nil }, nil)
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		err = s.Put(i)
	}
	if !errors.Is(err, ErrStalled) || !s.Stalled() {
		t.Errorf("a client that reads nothing: %v (stalled %v), want ErrStalled", err, s.Stalled())
	}
}
