package server

import (
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
)

// operationPrefix starts every operation's name: operations/<job id>.
const operationPrefix = "operations/"

// operationName is the name of job id's operation.
func operationName(id string) string { return operationPrefix + id }

// jobIDOf reads the job id out of an operation name.
func jobIDOf(name string) (string, error) {
	id, ok := strings.CutPrefix(name, operationPrefix)
	if !ok || len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("name %.64q: an operation is named operations/ and 32 hex digits", name)
	}
	return id, nil
}

var jobStates = map[string]cb.JobState{
	store.JobRunning: cb.JobState_JOB_STATE_RUNNING, store.JobSucceeded: cb.JobState_JOB_STATE_SUCCEEDED,
	store.JobFailed: cb.JobState_JOB_STATE_FAILED, store.JobCancelled: cb.JobState_JOB_STATE_CANCELLED,
}

// jobMetadata is job j's JobMetadata: the progress the jobs layer
// recorded (its persistence message is JobMetadata's wire form, so the
// row's bytes read as one), with the state and times the row keeps.
func jobMetadata(j store.Job) (*cb.JobMetadata, error) {
	md := &cb.JobMetadata{}
	if err := proto.Unmarshal(j.Progress, md); err != nil {
		return nil, fmt.Errorf("job %s: progress: %w", j.ID, err)
	}
	md.State = jobStates[j.State]
	md.CreateTime, md.UpdateTime, md.EndTime = timestamp(j.Created), timestamp(j.Updated), timestamp(j.Done)
	md.CancelRequested = j.CancelRequested
	md.Attempt = uint32(max(j.Attempt, 1))
	if j.State != store.JobRunning {
		md.Phase = cb.JobPhase_JOB_PHASE_DONE
	}
	return md, nil
}

// operation is job j as a google.longrunning.Operation: its metadata, and
// once done its response (ExportJobResult or ImportJobResult, whose wire
// forms the row's result is) or its error (CANCELLED for a cancelled job,
// per AIP-151).
func operation(j store.Job) (*longrunningpb.Operation, error) {
	md, err := jobMetadata(j)
	if err != nil {
		return nil, err
	}
	var failure *spb.Status
	if j.State == store.JobFailed || j.State == store.JobCancelled {
		failure = jobError(j, md)
	}
	mdAny, err := anypb.New(md)
	if err != nil {
		return nil, err
	}
	op := &longrunningpb.Operation{Name: operationName(j.ID), Metadata: mdAny, Done: j.State != store.JobRunning}
	switch j.State {
	case store.JobSucceeded:
		var result proto.Message = &cb.ExportJobResult{}
		switch j.Kind {
		case store.JobImport:
			result = &cb.ImportJobResult{}
		case store.JobErase, store.JobEraseDryRun:
			result = &cb.EraseOwnerResult{}
		}
		if err := proto.Unmarshal(j.Result, result); err != nil {
			return nil, fmt.Errorf("job %s: result: %w", j.ID, err)
		}
		a, err := anypb.New(result)
		if err != nil {
			return nil, err
		}
		op.Result = &longrunningpb.Operation_Response{Response: a}
	case store.JobFailed, store.JobCancelled:
		op.Result = &longrunningpb.Operation_Error{Error: failure}
	}
	return op, nil
}

// jobError is a failed job's error as its operation shows it: its code
// and message, and its reason as a google.rpc.ErrorInfo, as an RPC's
// status carries it (a job that ended before reasons were recorded gets
// its code's).
func jobError(j store.Job, md *cb.JobMetadata) *spb.Status {
	r := fault.Reason(md.GetErrorReason())
	if r == "" {
		r = fault.KindReason(fault.Kind(j.ErrorCode))
		md.ErrorReason = string(r)
	}
	return newStatus(codes.Code(j.ErrorCode), r, j.ErrorMessage, nil).Proto()
}

// timestamp is t for a JobMetadata field; nil for the zero time.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// importResponse is an import's result as the API reports it.
func importResponse(r backup.ImportResult) *cb.ImportResponse {
	counts := func(c backup.ElementCounts) *cb.ElementCounts {
		return &cb.ElementCounts{Inserted: c.Inserted, Updated: c.Updated, Unchanged: c.Unchanged}
	}
	return &cb.ImportResponse{
		Metadata: r.Metadata, Groups: counts(r.Groups), Messages: counts(r.Messages), Consent: counts(r.Consent),
		Records: r.Records, Skipped: r.Skipped, LegacyRecords: r.Legacy,
	}
}

// nonconformingOf is the export rule an API value names (an undefined
// value is refused at the door, by checkNonconforming).
func nonconformingOf(n cb.NonconformingRecords) backup.Nonconforming {
	switch n {
	case cb.NonconformingRecords_NONCONFORMING_RECORDS_EXCLUDE:
		return backup.ExcludeNonconforming
	case cb.NonconformingRecords_NONCONFORMING_RECORDS_REPAIR:
		return backup.RepairNonconforming
	}
	return backup.FailNonconforming
}
