package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/server/pagetoken"
	"github.com/contentbackup/contentbackup/internal/store"
)

// OperationsService implements google.longrunning.Operations over the
// job table. A principal sees an operation only when it holds the job
// kind's scope (archive.export, archive.import) for the job's owner; any
// other operation reads as NOT_FOUND, whether or not it exists.
type OperationsService struct {
	longrunningpb.UnimplementedOperationsServer
	jobs   *jobs.Manager
	store  store.Store
	tokens *pagetoken.Sealer
}

const (
	// maxWait bounds one WaitOperation; a client waits longer by calling
	// again.
	maxWait = 5 * time.Minute
	// defaultWait is a WaitOperation's wait when it names none.
	defaultWait = time.Minute
)

func jobScope(kind string) auth.Scope {
	switch kind {
	case store.JobImport:
		return auth.ScopeArchiveImport
	case store.JobErase, store.JobEraseDryRun:
		return auth.ScopeOwnersErase
	}
	return auth.ScopeArchiveExport
}

func visible(p *auth.Principal, j store.Job) bool {
	return p.Has(jobScope(j.Kind)) && p.Owners.Contains(j.Owner)
}

// describe is job j as an operation; a finished erasure's response says
// where it stands against its completion point, which the key worker
// reaches after the job ended (jobs.ErasureCompletion).
func (s *OperationsService) describe(ctx context.Context, j store.Job) (*longrunningpb.Operation, error) {
	op, err := operationOf(j)
	if err != nil || j.Kind != store.JobErase || j.State != store.JobSucceeded {
		return op, err
	}
	result := &cb.EraseOwnerResult{}
	if err := op.GetResponse().UnmarshalTo(result); err != nil {
		return nil, hide(codes.Internal, fault.ReasonInternal, msgInternal, err, nil)
	}
	complete, since, waiting, err := s.jobs.Keys.ErasureCompletion(ctx, j.ID)
	if err != nil {
		return nil, statusOf(err)
	}
	switch {
	case complete && since.IsZero():
		result.UnreadableSince = timestamp(j.Done) // it destroyed no key: complete when it ended
	case complete:
		result.UnreadableSince = timestamp(since)
	default:
		result.WaitingOnKeks = waiting
	}
	a, err := anypb.New(result)
	if err != nil {
		return nil, hide(codes.Internal, fault.ReasonInternal, msgInternal, err, nil)
	}
	op.Result = &longrunningpb.Operation_Response{Response: a}
	return op, nil
}

// job reads the operation name's job, as the caller may see it.
func (s *OperationsService) job(ctx context.Context, name string) (store.Job, error) {
	id, err := jobIDOf(name)
	if err != nil {
		return store.Job{}, status.Error(codes.InvalidArgument, err.Error())
	}
	j, err := s.store.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !visible(auth.FromContext(ctx), j)) {
		return store.Job{}, status.Errorf(codes.NotFound, "operation %s: not found", name)
	}
	if err != nil {
		return store.Job{}, statusOf(err)
	}
	return j, nil
}

func (s *OperationsService) GetOperation(ctx context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	j, err := s.job(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return s.describe(ctx, j)
}

// WaitOperation returns the operation once done, or as it stands when
// the timeout (default 1 minute, at most 5) or the call's deadline ends.
func (s *OperationsService) WaitOperation(ctx context.Context, req *longrunningpb.WaitOperationRequest) (*longrunningpb.Operation, error) {
	j, err := s.job(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	wait := defaultWait
	if req.GetTimeout() != nil {
		if err := req.GetTimeout().CheckValid(); err != nil || req.GetTimeout().AsDuration() < 0 {
			return nil, status.Error(codes.InvalidArgument, "timeout: not a valid non-negative duration")
		}
		wait = min(req.GetTimeout().AsDuration(), maxWait)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ended, err := s.jobs.Runner.Wait(wctx, j.ID, 0)
	switch {
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case err == nil:
		j = ended
	case wctx.Err() != nil:
		// The wait's time ran out, perhaps in the middle of a read whose
		// answer is then no job at all: answer the job as it stands now.
		if j, err = s.job(ctx, req.GetName()); err != nil {
			return nil, err
		}
	default:
		return nil, statusOf(err)
	}
	return s.describe(ctx, j)
}

// CancelOperation asks a running job to stop; it ends CANCELLED within a
// second, its object never committed. Cancelling a cancelled job is a
// no-op; a job that already succeeded or failed is FAILED_PRECONDITION.
func (s *OperationsService) CancelOperation(ctx context.Context, req *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	j, err := s.job(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	switch j.State {
	case store.JobCancelled:
		return &emptypb.Empty{}, nil
	case store.JobSucceeded, store.JobFailed:
		return nil, status.Errorf(codes.FailedPrecondition, "operation %s already ended %s", req.GetName(), j.State)
	}
	if _, err := s.jobs.Runner.Cancel(ctx, j.ID); err != nil {
		return nil, statusOf(err)
	}
	return &emptypb.Empty{}, nil
}

// DeleteOperation forgets an ended job (not its object); a running one is
// FAILED_PRECONDITION.
func (s *OperationsService) DeleteOperation(ctx context.Context, req *longrunningpb.DeleteOperationRequest) (*emptypb.Empty, error) {
	j, err := s.job(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if j.Kind == store.JobErase {
		// The erasure's record is its audit trail: who erased the owner
		// and when. It stays.
		return nil, status.Error(codes.FailedPrecondition, "an erasure's operation is its audit record and is kept")
	}
	if err := s.store.DeleteJob(ctx, j.ID); err != nil {
		return nil, statusOf(err)
	}
	return &emptypb.Empty{}, nil
}

// listFilter is the filter ListOperations takes: owner="..." and done=
// true|false, joined by AND (a subset of AIP-160).
type listFilter struct {
	owner string
	done  *bool
}

func parseFilter(f string) (listFilter, error) {
	var lf listFilter
	f = strings.TrimSpace(f)
	if f == "" {
		return lf, nil
	}
	for _, term := range strings.Split(f, " AND ") {
		field, value, ok := strings.Cut(strings.TrimSpace(term), "=")
		if !ok {
			return lf, fmt.Errorf("filter: term %.64q is not field=value", term)
		}
		field, value = strings.TrimSpace(field), strings.TrimSpace(value)
		switch field {
		case "owner":
			if len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
				return lf, fmt.Errorf(`filter: owner takes a quoted value: owner="alice"`)
			}
			lf.owner = value[1 : len(value)-1]
		case "done":
			b := value == "true"
			if !b && value != "false" {
				return lf, fmt.Errorf("filter: done is true or false")
			}
			lf.done = &b
		default:
			return lf, fmt.Errorf("filter: field %.64q; filter on owner and done", field)
		}
	}
	return lf, nil
}

// listScanPages bounds the store pages one ListOperations reads looking
// for operations the caller may see; past it the page ends early with a
// token to go on.
const listScanPages = 20

// ListOperations lists the operations the caller may see, oldest first.
func (s *OperationsService) ListOperations(ctx context.Context, req *longrunningpb.ListOperationsRequest) (*longrunningpb.ListOperationsResponse, error) {
	size, err := pagetoken.Size(req.GetPageSize())
	if err != nil {
		return nil, statusOf(err) // a BadRequest naming page_size
	}
	filter, err := parseFilter(req.GetFilter())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	bound := pagetoken.Binding([]byte(req.GetFilter()), []byte(req.GetName()))
	after := ""
	if req.GetPageToken() != "" {
		cursor, err := s.tokens.Open(principalName(ctx), pagetoken.Operations, bound, req.GetPageToken())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		after = string(cursor)
	}
	p := auth.FromContext(ctx)
	resp := &longrunningpb.ListOperationsResponse{}
	if filter.owner != "" && !p.Owners.Contains(filter.owner) {
		// An owner the caller may not see answers as one with no jobs,
		// without reading them: whether a next page exists would tell
		// whether that owner has any.
		return resp, nil
	}
	for range listScanPages {
		page, err := s.store.ListJobs(ctx, store.JobQuery{Owner: filter.owner, After: after, Limit: size})
		if err != nil {
			return nil, statusOf(err)
		}
		for _, j := range page {
			after = j.ID
			if !visible(p, j) || (filter.done != nil && *filter.done != (j.State != store.JobRunning)) {
				continue
			}
			op, err := s.describe(ctx, j)
			if err != nil {
				return nil, err
			}
			resp.Operations = append(resp.Operations, op)
			if len(resp.Operations) == size {
				break
			}
		}
		if len(resp.Operations) == size {
			break
		}
		if len(page) < size {
			return resp, nil // the end
		}
	}
	resp.NextPageToken = s.tokens.Seal(principalName(ctx), pagetoken.Operations, bound, []byte(after))
	return resp, nil
}
