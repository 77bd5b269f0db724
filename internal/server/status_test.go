package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
)

// TestFaultKindsAreCodes: codeOf, the one table from kind to code, is the
// identity because fault numbers its kinds as google.rpc.Code, which a job
// stores as its operation's error code; a kind renumbered fails here.
func TestFaultKindsAreCodes(t *testing.T) {
	for k, want := range map[fault.Kind]codes.Code{
		fault.Canceled: codes.Canceled, fault.Invalid: codes.InvalidArgument, fault.DeadlineExceeded: codes.DeadlineExceeded,
		fault.NotFound: codes.NotFound, fault.AlreadyExists: codes.AlreadyExists, fault.PermissionDenied: codes.PermissionDenied,
		fault.Exhausted: codes.ResourceExhausted, fault.FailedPrecondition: codes.FailedPrecondition, fault.Aborted: codes.Aborted,
		fault.Internal: codes.Internal, fault.Unavailable: codes.Unavailable,
	} {
		if got := codeOf(k); got != want {
			t.Errorf("kind %d maps to %s; want %s", k, got, want)
		}
	}
}

// TestReasonsAreTheAPIs: fault's reasons are the API's ErrorReason
// values, named without their prefix, in both directions and in order,
// so a reason the server sends is always one a client's enum holds, and
// one the API declares is one the server can send.
func TestReasonsAreTheAPIs(t *testing.T) {
	values := cb.ErrorReason_ERROR_REASON_UNSPECIFIED.Descriptor().Values()
	if values.Len()-1 != len(fault.Reasons) {
		t.Fatalf("the API declares %d reasons, fault %d", values.Len()-1, len(fault.Reasons))
	}
	for i, r := range fault.Reasons {
		v := values.ByNumber(protoreflect.EnumNumber(i + 1))
		if v == nil || strings.TrimPrefix(string(v.Name()), "ERROR_REASON_") != string(r) {
			t.Errorf("reason %d: fault says %s, the API %v", i+1, r, v.Name())
		}
	}
	// Every kind's own reason is one of them.
	for k := range fault.Kind(17) {
		if r := fault.KindReason(k); !slices.Contains(fault.Reasons, r) {
			t.Errorf("kind %d: reason %s is not the API's", k, r)
		}
	}
}

// TestEveryStatusHasAReason: statusOf gives each kind of error its
// reason, a sentinel's own before its kind's, and the reasons stage gives
// a status made without one its code's.
func TestEveryStatusHasAReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
		want string
	}{
		{jobs.ErrBackupNotComplete, codes.FailedPrecondition, "BACKUP_NOT_COMPLETE"},
		{fmt.Errorf("hold: %w", store.ErrHeld), codes.FailedPrecondition, "HELD"},
		{store.ErrOwnerErasing, codes.FailedPrecondition, "OWNER_ERASING"},
		{jobs.ErrQueueFull, codes.ResourceExhausted, "QUEUE_FULL"},
		{jobs.ErrObjectExists, codes.AlreadyExists, "ALREADY_EXISTS"},
		{fmt.Errorf("key: %w", jobs.ErrKeyUnavailable), codes.FailedPrecondition, "KEY_UNAVAILABLE"},
		{records.ErrNotDeletable, codes.FailedPrecondition, "NOT_DELETABLE"},
		{records.ErrNotAuthorized, codes.PermissionDenied, "NOT_SENDER_OR_SUPER_ADMIN"},
		{&records.FieldError{Field: "id", Reason: "empty"}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{&budget.ExceededError{Limit: "decode", Bytes: 10}, codes.ResourceExhausted, "BUDGET_EXCEEDED"},
		{&store.FullError{Engine: "sqlite", Err: errors.New("disk full")}, codes.ResourceExhausted, "STORE_FULL"},
		{fmt.Errorf("read: %w", store.ErrUnavailable), codes.Unavailable, "STORE_UNAVAILABLE"},
		{store.ErrNotFound, codes.NotFound, "NOT_FOUND"},
		{context.Canceled, codes.Canceled, "CANCELLED"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
		{errors.New("a bug"), codes.Internal, "INTERNAL"},
	} {
		err := statusOf(tc.err)
		if status.Code(err) != tc.code || reason(err) != tc.want {
			t.Errorf("%v: %s %q, want %s %s", tc.err, status.Code(err), reason(err), tc.code, tc.want)
		}
	}
	if err := jobStatus(fmt.Errorf("backup x: %w", jobs.ErrBackupNotFound), "x"); reason(err) != "BACKUP_NOT_FOUND" {
		t.Errorf("a backup not found: %v %q", err, reason(err))
	}
	plain := status.Error(codes.FailedPrecondition, "a handler's own status")
	if got := reason(withCodeReason(plain)); got != "FAILED_PRECONDITION" {
		t.Errorf("a status without a reason, through the reasons stage: %q", got)
	}
	if got := reason(withCodeReason(statusOf(jobs.ErrQueueFull))); got != "QUEUE_FULL" {
		t.Errorf("a status with a reason, through the reasons stage: %q, want it kept", got)
	}
	hidden := hide(codes.Unavailable, fault.ReasonStoreUnavailable, msgUnavailable, errors.New("dial tcp: refused"), nil)
	var hc *hiddenCause
	if err := withCodeReason(hidden); !errors.As(err, &hc) || reason(err) != "STORE_UNAVAILABLE" {
		t.Errorf("a hidden cause through the reasons stage: %v", err)
	}
}

// TestCallersOwnDeadline (issue 52): a call whose caller hung up or whose
// deadline passed is answered CANCELLED or DEADLINE_EXCEEDED when its
// error blames the server (the driver's lost connection, a cancelled
// statement), the error kept as the cause for the log; an error that is
// the caller's own stands, and a live call's error is untouched.
func TestCallersOwnDeadline(t *testing.T) {
	lost := hide(codes.Unavailable, fault.ReasonStoreUnavailable, msgUnavailable, errors.New("use of closed network connection"), nil)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		code codes.Code
	}{
		{"a hang-up during a query", cancelled, lost, codes.Canceled},
		{"a deadline during a query", expired, lost, codes.DeadlineExceeded},
		{"a cancelled statement", expired, statusOf(errors.New("ERROR: canceling statement due to user request (SQLSTATE 57014)")), codes.DeadlineExceeded},
		{"the caller's own mistake", expired, withReason(codes.InvalidArgument, fault.ReasonInvalidArgument, "owner: empty"), codes.InvalidArgument},
		{"a live call", context.Background(), lost, codes.Unavailable},
	} {
		err := callersOwn(tc.ctx, tc.err)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
		if tc.code != status.Code(tc.err) && !strings.Contains(err.Error(), tc.err.Error()) {
			t.Errorf("%s: the cause is gone from the log line: %q", tc.name, err.Error())
		}
	}
}
