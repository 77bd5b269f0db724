// Package eventually waits in tests for a condition, polling it, in place
// of sleeping for a fixed time: a fixed sleep is too short on a loaded
// machine and wasted on an idle one.
package eventually

import (
	"testing"
	"time"
)

// Poll is how often a condition is checked.
const Poll = 20 * time.Millisecond

// True polls cond until it holds, failing the test with failure() (the
// state it last saw) when within passes first.
func True(t testing.TB, within time.Duration, cond func() bool, failure func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, failure())
		}
		time.Sleep(Poll)
	}
}

// Within polls cond until it holds or within passes, and reports whether
// it held, for a test that then says what it saw itself.
func Within(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Poll)
	}
	return true
}
