package jobs

import (
	"fmt"
	"strings"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/store"
)

// OperationPrefix starts every operation's name: operations/<job id>.
const OperationPrefix = "operations/"

// OperationName is the name of job id's operation.
func OperationName(id string) string { return OperationPrefix + id }

// JobID reads the job id out of an operation name.
func JobID(name string) (string, error) {
	id, ok := strings.CutPrefix(name, OperationPrefix)
	if !ok || len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("name %.64q: an operation is named operations/ and 32 hex digits", name)
	}
	return id, nil
}

var states = map[string]cb.JobState{
	store.JobRunning: cb.JobState_JOB_STATE_RUNNING, store.JobSucceeded: cb.JobState_JOB_STATE_SUCCEEDED,
	store.JobFailed: cb.JobState_JOB_STATE_FAILED, store.JobCancelled: cb.JobState_JOB_STATE_CANCELLED,
}

// Metadata is a job's JobMetadata: its last recorded progress, with the
// state and times the store keeps.
func Metadata(j store.Job) (*cb.JobMetadata, error) {
	md := &cb.JobMetadata{}
	if err := proto.Unmarshal(j.Progress, md); err != nil {
		return nil, fmt.Errorf("job %s: progress: %w", j.ID, err)
	}
	md.State = states[j.State]
	md.CreateTime, md.UpdateTime, md.EndTime = timestamp(j.Created), timestamp(j.Updated), timestamp(j.Done)
	md.CancelRequested = j.CancelRequested
	if j.State != store.JobRunning {
		md.Phase = cb.JobPhase_JOB_PHASE_DONE
	}
	return md, nil
}

// Operation is job j as a google.longrunning.Operation: its metadata, and
// once done its response (ExportJobResult or ImportJobResult) or its error
// (CANCELLED for a cancelled job, per AIP-151).
func Operation(j store.Job) (*longrunningpb.Operation, error) {
	md, err := Metadata(j)
	if err != nil {
		return nil, err
	}
	mdAny, err := anypb.New(md)
	if err != nil {
		return nil, err
	}
	op := &longrunningpb.Operation{Name: OperationName(j.ID), Metadata: mdAny, Done: j.State != store.JobRunning}
	switch j.State {
	case store.JobSucceeded:
		var result proto.Message = &cb.ExportJobResult{}
		if j.Kind == store.JobImport {
			result = &cb.ImportJobResult{}
		}
		if err := proto.Unmarshal(j.Result, result); err != nil {
			return nil, fmt.Errorf("job %s: result: %w", j.ID, err)
		}
		if op.Result, err = resultAny(result); err != nil {
			return nil, err
		}
	case store.JobFailed, store.JobCancelled:
		op.Result = &longrunningpb.Operation_Error{Error: &spb.Status{Code: j.ErrorCode, Message: j.ErrorMessage}}
	}
	return op, nil
}

func resultAny(m proto.Message) (*longrunningpb.Operation_Response, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return &longrunningpb.Operation_Response{Response: a}, nil
}
