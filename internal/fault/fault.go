// Package fault is the one vocabulary of failure below the gRPC edge: a
// few kinds, each meaning the same to every caller, that a domain error
// carries itself (a FaultKind method on its type, or fault.New for a
// sentinel) and that Of reads back through any wrapping. The edge maps
// each kind to one status code, for RPCs and job operations alike
// (internal/server, status.go). A kind's value is its code in the
// canonical error space of google.rpc.Code (AIP-193), the space an
// Operation's error and a gRPC status share, so a job's stored error code
// is its kind. Pure: no I/O, no gRPC.
package fault

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"
	"unicode/utf8"
)

// Kind is what kind of failure an error is.
type Kind int32

// The kinds, numbered as google.rpc.Code.
const (
	// Canceled: the caller, or a job's canceller, stopped it.
	Canceled Kind = 1
	// Invalid: what the caller sent (a field, an archive) is wrong; the
	// same request fails again.
	Invalid Kind = 3
	// DeadlineExceeded: the caller's deadline passed.
	DeadlineExceeded Kind = 4
	// NotFound: no such record, for this owner.
	NotFound Kind = 5
	// AlreadyExists: the thing to create is there already.
	AlreadyExists Kind = 6
	// PermissionDenied: the actor may not do this to this record.
	PermissionDenied Kind = 7
	// Exhausted: a limit, a budget or the store's space.
	Exhausted Kind = 8
	// FailedPrecondition: the state forbids it; retrying does not help
	// until the state changes.
	FailedPrecondition Kind = 9
	// Aborted: a conflict with another writer (a job ended elsewhere).
	Aborted Kind = 10
	// Internal: a bug, or a failure no kind names; its details are for
	// the server's log only.
	Internal Kind = 13
	// Unavailable: the store or storage cannot be reached now; the same
	// call may succeed later.
	Unavailable Kind = 14
)

// Kinded is an error that knows its kind.
type Kinded interface {
	error
	FaultKind() Kind
}

type sentinel struct {
	kind Kind
	msg  string
}

func (e *sentinel) Error() string   { return e.msg }
func (e *sentinel) FaultKind() Kind { return e.kind }

// New is a sentinel error of kind k, to compare with errors.Is.
func New(k Kind, msg string) error { return &sentinel{kind: k, msg: msg} }

// Of is err's kind: that of the outermost error in its chain that has one,
// else Canceled or DeadlineExceeded for a context's error, else the first
// of also's answers, else Internal. also holds classifiers a caller adds
// for errors that cannot carry a kind (a driver's connection errors).
func Of(err error, also ...func(error) (Kind, bool)) Kind {
	var k Kinded
	switch {
	case err == nil:
		return Internal
	case errors.As(err, &k):
		return k.FaultKind()
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	}
	for _, f := range also {
		if kind, ok := f(err); ok {
			return kind
		}
	}
	return Internal
}

// FileKind classifies a failure of the local filesystem, which carries
// no kind of its own (and whose errno would otherwise pass for a network
// error): a full disk or quota is Exhausted; a file that is missing,
// unreadable, or not a file where one is needed is FailedPrecondition,
// since the same call fails again until an operator fixes it. Its message
// names the file (fs.PathError).
func FileKind(err error) (Kind, bool) {
	var pathErr *fs.PathError
	var linkErr *os.LinkError
	if !errors.As(err, &pathErr) && !errors.As(err, &linkErr) {
		return 0, false
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return Exhausted, true
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EROFS), errors.Is(err, syscall.ELOOP), errors.Is(err, fs.ErrExist):
		return FailedPrecondition, true
	}
	return 0, false
}

// Hidden reports whether an error of kind k keeps its message for the
// server's log: a bug's or an outage's words name the database or its
// driver, never the caller's business.
func Hidden(k Kind) bool { return k == Internal || k == Unavailable }

// Clip bounds s at n bytes, cut on a character boundary, marking a cut
// with mark.
func Clip(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}
