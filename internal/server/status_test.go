package server

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/contentbackup/contentbackup/internal/fault"
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
