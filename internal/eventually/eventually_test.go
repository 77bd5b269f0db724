package eventually

import (
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	n := 0
	if !Within(5*time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Errorf("Within stopped at %d polls; want 3", n)
	}
	if Within(50*time.Millisecond, func() bool { return false }) {
		t.Error("Within reported a condition that never held")
	}
}
