package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

type codedErr int

func (c codedErr) Error() string { return fmt.Sprintf("sqlite error %d", int(c)) }
func (c codedErr) Code() int     { return int(c) }

type pgErr string

func (p pgErr) Error() string    { return "pg " + string(p) }
func (p pgErr) SQLState() string { return string(p) }

// TestUnavailable: the errors that mean "the database cannot be reached or
// is busy; try again" and those that mean a statement failed.
func TestUnavailable(t *testing.T) {
	for err, want := range map[error]bool{
		fmt.Errorf("postgres: list: %w", syscall.ECONNREFUSED): true,
		fmt.Errorf("read: %w", io.ErrUnexpectedEOF):            true,
		&net.OpError{Op: "dial", Err: errors.New("no route")}:  true,
		fmt.Errorf("sqlite: append: %w", codedErr(5)):          true, // SQLITE_BUSY
		codedErr(261):  true,  // SQLITE_BUSY_RECOVERY
		codedErr(6):    true,  // SQLITE_LOCKED
		codedErr(19):   false, // SQLITE_CONSTRAINT
		pgErr("57P01"): true,  // admin shutdown
		pgErr("08006"): true,  // connection failure
		pgErr("23505"): false, // unique violation
		fmt.Errorf("group %x: %w", "g", ErrNotFound): false,
		errors.New("something else"):                 false,
	} {
		if got := Unavailable(err); got != want {
			t.Errorf("Unavailable(%v) = %v; want %v", err, got, want)
		}
	}
}

// TestAFileIsNoOutage: a filesystem error (whose errno is a net.Error
// too) is not "the store is unavailable" (issue 33, finding 8).
func TestAFileIsNoOutage(t *testing.T) {
	_, err := os.Open(filepath.Join(t.TempDir(), "missing"))
	for _, e := range []error{err, fmt.Errorf("wrapped: %w", err), &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}} {
		if Unavailable(e) {
			t.Errorf("%v reads as the store unavailable", e)
		}
	}
	if !Unavailable(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}) {
		t.Error("a refused connection no longer reads as unavailable")
	}
}
