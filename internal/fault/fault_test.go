package fault

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"unicode/utf8"
)

type typed struct{}

func (typed) Error() string   { return "typed" }
func (typed) FaultKind() Kind { return Exhausted }

func TestOf(t *testing.T) {
	notFound := New(NotFound, "not found")
	driver := errors.New("connection refused")
	isDriver := func(err error) (Kind, bool) { return Unavailable, errors.Is(err, driver) }
	for _, c := range []struct {
		err  error
		also []func(error) (Kind, bool)
		want Kind
	}{
		{fmt.Errorf("group x: %w", notFound), nil, NotFound},
		{fmt.Errorf("wrapped: %w", typed{}), nil, Exhausted},
		// The outermost kind wins: a job's "cannot export" over the field
		// error it wraps.
		{fmt.Errorf("%w: %w", New(FailedPrecondition, "cannot export"), New(Invalid, "field")), nil, FailedPrecondition},
		{fmt.Errorf("call: %w", context.Canceled), nil, Canceled},
		{context.DeadlineExceeded, nil, DeadlineExceeded},
		{fmt.Errorf("query: %w", driver), []func(error) (Kind, bool){isDriver}, Unavailable},
		{driver, nil, Internal},
		{nil, nil, Internal},
	} {
		if got := Of(c.err, c.also...); got != c.want {
			t.Errorf("Of(%v) = %d; want %d", c.err, got, c.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", notFound), notFound) {
		t.Error("a sentinel is not found by errors.Is")
	}
}

func TestClipOnCharacterBoundary(t *testing.T) {
	s := "ab\u00e9\u00e9" // a, b, then two 2-byte characters
	for n := range len(s) + 1 {
		got := Clip(s, n, "…")
		if !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q: split a character", s, n, got)
		}
	}
	if Clip("short", 10, "…") != "short" {
		t.Error("Clip changed a short string")
	}
}
