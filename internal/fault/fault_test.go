package fault

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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

// TestFileKind: a file's failure is classified by what an operator must
// do, never as an outage to retry (issue 33, finding 8: a garbage or
// unreadable KEK file, a full bucket, a deleted object read as
// "unavailable"), whatever wraps it.
func TestFileKind(t *testing.T) {
	dir := t.TempDir()
	_, missing := os.Open(filepath.Join(dir, "kek.key"))
	_, notDir := os.Open(filepath.Join(dir, "kek.key", "x"))
	full := &fs.PathError{Op: "write", Path: filepath.Join(dir, "a"), Err: syscall.ENOSPC}
	denied := &fs.PathError{Op: "open", Path: filepath.Join(dir, "a"), Err: syscall.EACCES}
	isDir := &fs.PathError{Op: "read", Path: dir, Err: syscall.EISDIR}
	for _, c := range []struct {
		name string
		err  error
		want Kind
	}{
		{"missing", missing, FailedPrecondition},
		{"under a missing directory", notDir, FailedPrecondition},
		{"unreadable", denied, FailedPrecondition},
		{"a directory", isDir, FailedPrecondition},
		{"a full disk", full, Exhausted},
		{"a full disk, wrapped", fmt.Errorf("export: %w", full), Exhausted},
	} {
		if got, ok := FileKind(c.err); !ok || got != c.want {
			t.Errorf("%s (%v): %v %v, want %v", c.name, c.err, got, ok, c.want)
		}
		if got := Of(c.err, FileKind); got != c.want {
			t.Errorf("Of(%s) = %v, want %v", c.name, got, c.want)
		}
	}
	if _, ok := FileKind(syscall.ECONNREFUSED); ok {
		t.Error("a refused connection classified as a file's failure")
	}
	if _, ok := FileKind(errors.New("x")); ok {
		t.Error("a plain error classified as a file's failure")
	}
}
