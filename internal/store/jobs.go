package store

import (
	"context"
	"fmt"
	"time"

	"github.com/contentbackup/contentbackup/internal/fault"
)

// Jobs keeps BackupService's server-side export and import jobs. Unlike
// conversations a job is not read under one owner: operators list them
// across owners, and the service decides which a principal may see.
type Jobs interface {
	// CreateJob stores a new running job. A second running export job for
	// the same owner fails with ErrJobConflict; a job whose RequestID the
	// owner's kept jobs of its kind hold already, with ErrRequestSeen.
	// It checks the erasure fence in the same transaction: a job (not an
	// erasure) whose Owner or SourceOwner an erasure is running for is
	// ErrOwnerErasing. An erasure is stored whatever runs: it stops the
	// owner's jobs running when it was stored (RunningJobsFor) before it
	// erases anything.
	CreateJob(ctx context.Context, j Job) error
	// GetJob returns one job or ErrNotFound.
	GetJob(ctx context.Context, id string) (Job, error)
	// GetJobByRequest returns the owner's job of kind that was started
	// with requestID, or ErrNotFound.
	GetJobByRequest(ctx context.Context, owner, kind, requestID string) (Job, error)
	// ListJobs returns up to q.Limit jobs in id order (creation order),
	// after q.After, of q.Owner when it is set.
	ListJobs(ctx context.Context, q JobQuery) ([]Job, error)
	// RenewJob records a running job's progress and extends its lease, and
	// reports whether a cancel was asked for. A job that is no longer
	// running (finished, or failed by ExpireJobs), or that another replica
	// took over (its attempt is not attempt), is ErrFailedPrecondition, so
	// its runner stops.
	RenewJob(ctx context.Context, id string, attempt int, progress []byte, leaseUntil time.Time) (cancelRequested bool, err error)
	// FinishJob ends a running job in state (JobSucceeded, JobFailed or
	// JobCancelled) with its result or error. A job that is no longer
	// running, or no longer at attempt, is ErrFailedPrecondition and keeps
	// what it has.
	FinishJob(ctx context.Context, id string, attempt int, end JobEnd) error
	// RequestCancel marks a running job to be cancelled and returns it.
	// A finished job is returned unchanged.
	RequestCancel(ctx context.Context, id string) (Job, error)
	// DeleteJob removes a finished job; a running one is
	// ErrFailedPrecondition.
	DeleteJob(ctx context.Context, id string) error
	// ClaimJob takes over one running job whose lease ended before now
	// (its server stopped without finishing it) and that has run fewer
	// than maxAttempts times: its attempt goes up by one and its lease
	// runs to leaseUntil, in one statement, so of replicas claiming at
	// once one gets it. It returns the job as claimed, or ErrNotFound.
	ClaimJob(ctx context.Context, now, leaseUntil time.Time, maxAttempts int) (Job, error)
	// ExpireJobs fails every running job whose lease ended before now and
	// that has run maxAttempts times (or more), with code and message. It
	// returns their ids.
	ExpireJobs(ctx context.Context, now time.Time, maxAttempts int, code int32, message string) ([]string, error)
	// DeleteFinishedJobs removes up to limit jobs that ended before
	// before, and returns how many it removed.
	DeleteFinishedJobs(ctx context.Context, before time.Time, limit int) (int, error)
}

// ErrRequestSeen: a job of the owner's was started with the same request
// id; GetJobByRequest returns it.
var ErrRequestSeen = fault.New(fault.AlreadyExists, "a job was started with this request_id")

// ErrJobConflict: the owner already has a running export job.
var ErrJobConflict = fault.New(fault.AlreadyExists, "the owner already has a running export job")

// Job kinds and states as stored.
const (
	JobExport = "export"
	JobImport = "import"
	// JobErase erases an owner; its row outlives KeepFinished, as the
	// erasure's audit record.
	JobErase = "erase"
	// JobEraseDryRun reports what an erasure would remove; an ordinary
	// job, deleted like any once ended.
	JobEraseDryRun = "erase_dry_run"

	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
	JobCancelled = "cancelled"
)

// Job is one stored job. Spec, Progress and Result are opaque to the
// store: the jobs package's encodings.
type Job struct {
	ID, Kind, Owner, Principal, State string
	// SourceOwner is the owner whose backup an import reads, when it is
	// not Owner (else ""): an erasure of either fences the job.
	SourceOwner string
	// RequestID is the client's id for the start (AIP-155), or empty.
	RequestID string
	// Attempt is 1 for the first run, one more for each takeover.
	Attempt                int
	Spec, Progress, Result []byte
	// ErrorCode and ErrorMessage say why a failed or cancelled job ended
	// (a gRPC code and a message safe to show its caller).
	ErrorCode       int32
	ErrorMessage    string
	CancelRequested bool
	LeaseUntil      time.Time
	Created         time.Time
	Updated         time.Time
	// Done is zero while the job runs.
	Done time.Time
}

// JobEnd is how a job ended.
type JobEnd struct {
	State        string
	Progress     []byte
	Result       []byte
	ErrorCode    int32
	ErrorMessage string
	At           time.Time
}

// JobQuery selects a page of jobs.
type JobQuery struct {
	// Owner, when set, lists only that owner's jobs.
	Owner string
	// After is the last id of the previous page; empty for the first.
	After string
	Limit int
}

// FenceLostError: a job attempt's write was refused because the attempt
// no longer holds its job: a later attempt took it over, it ended, or it
// is gone. The attempt stops, and what it would have written is not
// written. As Temporal's ShardOwnershipLostError, it is its own type, so
// a runner tells it from every other refusal (errors.As); it is also an
// ErrFailedPrecondition for callers that only need the kind.
type FenceLostError struct {
	// Job and Attempt are the fence the write carried.
	Job     string
	Attempt int
	// Holder is the job's attempt now and State its state ("" when the
	// job is gone); Owner, when set, is the job a catalog row belongs to
	// instead.
	Holder int
	State  string
	Owner  string
}

func (e *FenceLostError) Error() string {
	switch {
	case e.Owner != "":
		return fmt.Sprintf("fence lost: the row belongs to job %.64q, not %.64q", e.Owner, e.Job)
	case e.State == "":
		return fmt.Sprintf("fence lost: job %s is gone", e.Job)
	case e.State != JobRunning:
		return fmt.Sprintf("fence lost: job %s is %s", e.Job, e.State)
	}
	return fmt.Sprintf("fence lost: job %s is at attempt %d, taken over from attempt %d", e.Job, e.Holder, e.Attempt)
}

// Unwrap makes a lost fence an ErrFailedPrecondition.
func (e *FenceLostError) Unwrap() error { return ErrFailedPrecondition }
