package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/store"
)

// The error room: every mapping from a domain error to the status a
// caller gets is in this file. Handlers return statusOf(err) (or, for a
// job's start, jobStatus; for an archive stream, archiveStatus, which
// adds the record number), and the "reasons" stage of the chain
// (chain.go) gives any status still without one its code's reason, so
// every error this server returns carries a google.rpc.ErrorInfo.
//
// Each error says its kind (internal/fault); codeOf maps kinds to codes.
// Its reason is the API's ErrorReason (fault.Reason mirrors it, and
// TestReasonsAreTheAPIs holds the two equal): the outermost reason in the
// error's chain (a sentinel made with fault.NewReason, a type with a
// FaultReason method), else its kind's.
//
//	records.FieldError                 INVALID_ARGUMENT, INVALID_ARGUMENT + BadRequest (field path)
//	fault.NotFound (store.ErrNotFound) NOT_FOUND, NOT_FOUND (BACKUP_NOT_FOUND for a backup)
//	fault.FailedPrecondition           FAILED_PRECONDITION, the sentinel's reason (HELD, NOT_DELETABLE, ...)
//	records.ErrNotAuthorized           PERMISSION_DENIED, NOT_SENDER_OR_SUPER_ADMIN
//	budget.ExceededError               RESOURCE_EXHAUSTED, BUDGET_EXCEEDED (metadata: limit, bytes)
//	store.FullError                    RESOURCE_EXHAUSTED, STORE_FULL
//	the database unreachable           UNAVAILABLE, STORE_UNAVAILABLE, a generic message (details logged)
//	context deadline / cancellation    DEADLINE_EXCEEDED / CANCELLED
//	anything else                      INTERNAL, INTERNAL "internal error" (a bug: details logged, counted by code)
//
// Messages are clipped to maxStatusMessage bytes, so no error repeats a
// large piece of what the caller sent.

// maxStatusMessage bounds a status message: what a caller sent is quoted
// at most in part (records quotes no more than 256 bytes of input).
const maxStatusMessage = 1024

// ErrorInfo domain of every detail this server attaches.
const errorDomain = authz.ErrorDomain

func clip(msg string) string { return fault.Clip(msg, maxStatusMessage, "… (truncated)") }

// newStatus is a status of code with reason as its google.rpc.ErrorInfo
// (with metadata, when any), then more details.
func newStatus(code codes.Code, reason fault.Reason, msg string, metadata map[string]string, more ...protoadapt.MessageV1) *status.Status {
	st := status.New(code, msg)
	details := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: string(reason), Domain: errorDomain, Metadata: metadata}}, more...)
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st
}

// withReason is a status error of code and reason, its message clipped.
func withReason(code codes.Code, reason fault.Reason, msg string) error {
	return newStatus(code, reason, clip(msg), nil).Err()
}

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

// hide is a status that tells the caller msg and keeps cause for the log.
func hide(code codes.Code, reason fault.Reason, msg string, cause error, metadata map[string]string) error {
	return &hiddenCause{st: newStatus(code, reason, msg, metadata), cause: cause}
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
// the status the caller gets: its kind decides the code (fault.Of), its
// reason the ErrorInfo (fault.ReasonOf); a few kinds of error add
// details; kinds that are the server's own trouble keep their words for
// the log.
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
		return hide(codes.ResourceExhausted, fault.ReasonStoreFull, "the store ("+full.Engine+") is out of space: writes are refused until space is freed; nothing of this call was written", err, nil)
	case errors.As(err, &fe):
		return newStatus(codes.InvalidArgument, fault.ReasonInvalidArgument, clip(err.Error()), nil, &errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: clip(fe.Field), Description: clip(fe.Reason)}},
		}).Err()
	case errors.As(err, &be):
		return budgetStatus(be, "")
	}
	k := fault.Of(err, fault.FileKind, store.UnavailableKind)
	switch k {
	case fault.Canceled:
		return withReason(codes.Canceled, fault.ReasonCancelled, "canceled")
	case fault.DeadlineExceeded:
		return withReason(codes.DeadlineExceeded, fault.ReasonDeadlineExceeded, "deadline exceeded")
	case fault.Unavailable:
		return hide(codes.Unavailable, unavailableReason(err), msgUnavailable, err, nil)
	case fault.NotFound, fault.FailedPrecondition, fault.Invalid, fault.AlreadyExists, fault.Exhausted, fault.PermissionDenied, fault.Aborted:
		return withReason(codeOf(k), fault.ReasonOf(err, k), err.Error())
	}
	return hide(codes.Internal, fault.ReasonInternal, msgInternal, err, nil)
}

// unavailableReason tells the store's outage from any other.
func unavailableReason(err error) fault.Reason {
	if store.Unavailable(err) {
		return fault.ReasonStoreUnavailable
	}
	return fault.ReasonOf(err, fault.Unavailable)
}

// budgetStatus is RESOURCE_EXHAUSTED naming the limit (and where, when
// at is set), with the limit in the ErrorInfo's metadata for programs.
func budgetStatus(be *budget.ExceededError, at string) error {
	msg := be.Error() + "; retry with less in one call, or later"
	if at != "" {
		msg = at + ": " + msg
	}
	return newStatus(codes.ResourceExhausted, fault.ReasonBudgetExceeded, msg, map[string]string{
		"limit": be.Limit, "bytes": strconv.FormatInt(be.Bytes, 10),
	}).Err()
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

// invalidArgument maps a codec error to INVALID_ARGUMENT; the codec's
// message names the member that was wrong.
func invalidArgument(field string, err error) error {
	if field == "" {
		return withReason(codes.InvalidArgument, fault.ReasonInvalidArgument, err.Error())
	}
	return withReason(codes.InvalidArgument, fault.ReasonInvalidArgument, field+": "+err.Error())
}

// msgBackupNotFound answers for a backup the caller cannot see, whether
// it is missing or another owner's: one code and one message, naming
// only the id the caller sent.
const msgBackupNotFound = "backup %.40s: not found"

// jobStatus maps the jobs layer's errors to the status the caller gets:
// statusOf's, but a backup the caller cannot see names only the id it
// sent, a damaged one keeps its cause for the log, and a job's own
// refusals (a full queue, a server stopping) show their words.
func jobStatus(err error, backupID string) error {
	switch {
	case errors.Is(err, jobs.ErrInvalid):
		return withReason(codes.InvalidArgument, fault.ReasonInvalidArgument, strings.TrimPrefix(err.Error(), jobs.ErrInvalid.Error()+": "))
	case errors.Is(err, jobs.ErrBackupNotFound):
		return withReason(codes.NotFound, fault.ReasonBackupNotFound, fmt.Sprintf(msgBackupNotFound, backupID))
	case errors.Is(err, store.ErrJobConflict):
		return withReason(codes.AlreadyExists, fault.ReasonAlreadyExists, err.Error())
	case errors.Is(err, jobs.ErrBackupDamaged):
		return hide(codes.FailedPrecondition, fault.ReasonBackupDamaged, "backup "+backupID+": its object or key no longer matches the catalog; it cannot be read", err, nil)
	case errors.Is(err, jobs.ErrShuttingDown):
		return withReason(codes.Unavailable, fault.ReasonUnavailable, err.Error())
	}
	return statusOf(err)
}

// exportFailure is the status of an export that ended, after n bytes,
// without its summary: not a complete backup.
func exportFailure(ctx context.Context, err error, n uint64) error {
	if backup.IsOptionsError(err) {
		// Refused before a byte was written.
		return withReason(codes.InvalidArgument, fault.ReasonInvalidArgument, err.Error())
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return statusOf(ctxErr)
	}
	msg := fmt.Sprintf("export failed after %d bytes; the partial output is not an archive", n)
	var ue *backup.UnexportableError
	if errors.As(err, &ue) {
		return withReason(codes.FailedPrecondition, fault.ReasonFailedPrecondition, msg+": "+ue.Error())
	}
	if store.Unavailable(err) {
		return hide(codes.Unavailable, fault.ReasonStoreUnavailable, msg+": "+msgUnavailable, err, nil)
	}
	return hide(codes.Internal, fault.ReasonInternal, msg, err, nil)
}

// recvStatus is the status of a client stream that ended before what the
// call needs (want) arrived.
func recvStatus(err error, want string) error {
	if errors.Is(err, io.EOF) {
		return withReason(codes.InvalidArgument, fault.ReasonInvalidArgument, "the stream ended before "+want)
	}
	return err
}

// archiveStatus maps what reading or importing an archive returned: a
// problem with the archive is INVALID_ARGUMENT naming the record (its
// number in the ErrorInfo's metadata), a group the store lacks
// FAILED_PRECONDITION, a store failure ABORTED (what was applied stays;
// retry from the start).
func archiveStatus(ctx context.Context, err error, op string) error {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return st.Err() // from the client's stream itself (an idle timeout, a broken stream)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return statusOf(ctxErr)
	}
	var be *budget.ExceededError
	if errors.As(err, &be) {
		return budgetStatus(be, op)
	}
	var (
		re *archive.RecordError
		ie *backup.ImportError
	)
	var metadata map[string]string
	switch {
	case errors.As(err, &ie):
		metadata = map[string]string{"record": strconv.FormatUint(ie.Record, 10)}
	case errors.As(err, &re):
		metadata = map[string]string{"record": strconv.FormatUint(re.Record, 10)}
	}
	var ve *archive.VersionError
	if errors.As(err, &ve) {
		metadata = map[string]string{"version": strconv.Itoa(int(ve.Version)), "supported": strconv.Itoa(archive.Version)}
	}
	if problem, ok := backup.ArchiveProblem(err); ok {
		return newStatus(codes.InvalidArgument, problem, clip(op+": "+err.Error()), metadata).Err()
	}
	if errors.Is(err, backup.ErrMissingGroup) {
		return newStatus(codes.FailedPrecondition, fault.ReasonMissingGroup, clip(op+": "+err.Error()), metadata).Err()
	}
	// The store failed: say where to resume, not what the database said.
	msg := op + " stopped"
	if record := metadata["record"]; record != "" {
		msg += " at record " + record
	}
	if store.Unavailable(err) {
		return hide(codes.Unavailable, fault.ReasonStoreUnavailable, msg+": "+msgUnavailable+"; the records before it are applied, and a retry from the start completes the rest", err, metadata)
	}
	return hide(codes.Aborted, fault.ReasonStoreFailed, msg+": the store failed; the records before it are applied, and a retry from the start completes the rest", err, metadata)
}

// withCodeReason gives a status error without an ErrorInfo its code's
// reason (the "reasons" stage of the chain); any other error is
// returned as it is.
func withCodeReason(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return err
		}
	}
	more := make([]protoadapt.MessageV1, 0, len(st.Details()))
	for _, d := range st.Details() {
		if m, ok := d.(protoadapt.MessageV1); ok {
			more = append(more, m)
		}
	}
	reasoned := newStatus(st.Code(), fault.KindReason(fault.Kind(st.Code())), st.Message(), nil, more...)
	var hc *hiddenCause
	if errors.As(err, &hc) {
		return &hiddenCause{st: reasoned, cause: hc.cause}
	}
	return reasoned.Err()
}

// callersOwn answers a call whose caller hung up or whose deadline
// passed with CANCELLED or DEADLINE_EXCEEDED, when the handler's error
// blames the server: the store's driver reports a query cut short by the
// caller's context as a lost connection or a failed statement, and an
// alert on UNAVAILABLE or INTERNAL would fire for a client's impatience.
// The handler's error stays the cause, for the log. An error that is the
// caller's own (INVALID_ARGUMENT, NOT_FOUND, ...) stands.
func callersOwn(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted:
	default:
		return err
	}
	code, reason, msg := codes.Canceled, fault.ReasonCancelled, "canceled"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code, reason, msg = codes.DeadlineExceeded, fault.ReasonDeadlineExceeded, "deadline exceeded"
	}
	return hide(code, reason, msg, err, nil)
}

// reasonsUnary and reasonsStream are the "reasons" stage (chain.go).
// reasons is the chain's reasons stage; ended, when set, is told of each
// call's error by method and reason.
func reasons(ended func(method, reason string)) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	note := func(fullMethod string, err error) error {
		if err != nil && ended != nil {
			ended(fullMethod[strings.LastIndexByte(fullMethod, '/')+1:], reasonIn(err))
		}
		return err
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		return resp, note(info.FullMethod, withCodeReason(callersOwn(ctx, err)))
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return note(info.FullMethod, withCodeReason(callersOwn(ss.Context(), handler(srv, ss))))
	}
	return unary, stream
}

// reasonIn is the ErrorInfo reason err carries ("" for none).
func reasonIn(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
