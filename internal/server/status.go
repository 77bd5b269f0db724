package server

import (
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/store"
)

// Every error a handler returns passes through statusOf (or, for archive
// streams, archiveStatus, which adds the record number): one place decides
// each error kind's code and what of it the caller may see.
//
// Each error says its kind (internal/fault); codeOf maps kinds to codes.
//
//	records.FieldError                 INVALID_ARGUMENT + BadRequest (field path)
//	fault.NotFound (store.ErrNotFound) NOT_FOUND
//	fault.FailedPrecondition           FAILED_PRECONDITION
//	records.ErrNotDeletable            FAILED_PRECONDITION + ErrorInfo NOT_DELETABLE
//	records.ErrNotAuthorized           PERMISSION_DENIED + ErrorInfo NOT_SENDER_OR_SUPER_ADMIN
//	budget.ExceededError               RESOURCE_EXHAUSTED + ErrorInfo BUDGET_EXCEEDED (limit, bytes)
//	the database unreachable           UNAVAILABLE, a generic message (details logged)
//	context deadline / cancellation    DEADLINE_EXCEEDED / CANCELED
//	anything else                      INTERNAL "internal error" (a bug: details logged, counted by code)
//
// Messages are clipped to maxStatusMessage bytes, so no error repeats a
// large piece of what the caller sent.

// maxStatusMessage bounds a status message: what a caller sent is quoted
// at most in part (records quotes no more than 256 bytes of input).
const maxStatusMessage = 1024

// ErrorInfo domain of every detail this server attaches.
const errorDomain = authz.ErrorDomain

func clip(msg string) string { return fault.Clip(msg, maxStatusMessage, "… (truncated)") }

// hiddenCause is a status for the caller that keeps, for the server's own
// log line, the cause it does not send: the request logger prints Error(),
// gRPC sends GRPCStatus().
type hiddenCause struct {
	st    *status.Status
	cause error
}

func (e *hiddenCause) Error() string              { return e.st.Message() + ": " + e.cause.Error() }
func (e *hiddenCause) GRPCStatus() *status.Status { return e.st }
func (e *hiddenCause) Unwrap() error              { return e.cause }

func hide(code codes.Code, msg string, cause error, details ...*errdetails.ErrorInfo) error {
	st := status.New(code, msg)
	for _, d := range details {
		if withD, err := st.WithDetails(d); err == nil {
			st = withD
		}
	}
	return &hiddenCause{st: st, cause: cause}
}

const (
	msgUnavailable = "the store is unavailable; retry with backoff"
	msgInternal    = "internal error"
)

// codeOf is the one table from a failure's kind to its code, for RPCs
// and job operations alike: fault's kinds are numbered as google.rpc.Code,
// which gRPC's codes are too (TestFaultKindsAreCodes holds them equal).
func codeOf(k fault.Kind) codes.Code { return codes.Code(k) }

// statusOf maps an error of the records, store, codec or budget layers to
// the status the caller gets: its kind decides the code (fault.Of); a
// few kinds of error add details; kinds that are the server's own trouble
// keep their words for the log.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err // already a status (from the client's own stream)
	}
	var (
		fe   *records.FieldError
		be   *budget.ExceededError
		full *store.FullError
	)
	switch {
	case errors.As(err, &full):
		// The write rolled back whole; say which store, not its driver's
		// words.
		return hide(codes.ResourceExhausted, "the store ("+full.Engine+") is out of space: writes are refused until space is freed; nothing of this call was written", err)
	case errors.As(err, &fe):
		st := status.New(codes.InvalidArgument, clip(err.Error()))
		if d, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: clip(fe.Field), Description: clip(fe.Reason)},
		}}); derr == nil {
			st = d
		}
		return st.Err()
	case errors.As(err, &be):
		return budgetStatus(be, "")
	case errors.Is(err, records.ErrNotDeletable):
		return withReason(codes.FailedPrecondition, "NOT_DELETABLE", clip(err.Error()))
	case errors.Is(err, records.ErrNotAuthorized):
		return withReason(codes.PermissionDenied, "NOT_SENDER_OR_SUPER_ADMIN", clip(err.Error()))
	}
	switch k := fault.Of(err, fault.FileKind, store.UnavailableKind); k {
	case fault.Canceled:
		return status.Error(codes.Canceled, "canceled")
	case fault.DeadlineExceeded:
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case fault.Unavailable:
		return hide(codes.Unavailable, msgUnavailable, err)
	case fault.NotFound, fault.FailedPrecondition, fault.Invalid, fault.AlreadyExists, fault.Exhausted, fault.PermissionDenied, fault.Aborted:
		return status.Error(codeOf(k), clip(err.Error()))
	}
	return hide(codes.Internal, msgInternal, err)
}

// budgetStatus is RESOURCE_EXHAUSTED naming the limit (and where, when
// at is set), with the limit in an ErrorInfo for programs.
func budgetStatus(be *budget.ExceededError, at string) error {
	msg := be.Error() + "; retry with less in one call, or later"
	if at != "" {
		msg = at + ": " + msg
	}
	st := status.New(codes.ResourceExhausted, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: "BUDGET_EXCEEDED", Domain: errorDomain, Metadata: map[string]string{
		"limit": be.Limit, "bytes": strconv.FormatInt(be.Bytes, 10),
	}}); err == nil {
		st = d
	}
	return st.Err()
}

// decodeBudgetStatus maps a decode the budget stopped.
func decodeBudgetStatus(err error, at string) error {
	var be *budget.ExceededError
	if errors.As(err, &be) {
		return budgetStatus(be, at)
	}
	var cbe *codec.BudgetError
	if errors.As(err, &cbe) {
		return statusOf(cbe.Err)
	}
	return statusOf(err)
}
