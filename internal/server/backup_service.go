package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	dsb "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/server/pagetoken"
	"github.com/contentbackup/contentbackup/internal/store"
)

// BackupService implements contentbackup.v1.BackupService: it starts jobs
// and answers with their operations.
type BackupService struct {
	cb.UnimplementedBackupServiceServer
	jobs   *jobs.Manager
	tokens *pagetoken.Sealer
}

// principalName is the proven principal's name in ctx, or "".
func principalName(ctx context.Context) string { return authz.PrincipalName(ctx) }

func (s *BackupService) StartExport(ctx context.Context, req *cb.StartExportRequest) (*longrunningpb.Operation, error) {
	if err := checkNonconforming(req.GetNonconforming()); err != nil {
		return nil, err
	}
	if req.GetKeyRef() != "" {
		return nil, status.Error(codes.InvalidArgument, "key_ref: no longer accepted; each backup is sealed with its own data key, which GetBackupKey returns")
	}
	if req.GetDestination() != nil {
		return nil, status.Error(codes.InvalidArgument, "destination: no longer accepted; the server chooses where a backup is stored: name a bucket (and a label) instead")
	}
	j, err := s.jobs.StartExport(ctx, principalName(ctx), jobs.ExportRequest{Owner: req.GetOwner(), Bucket: req.GetBucket(), Label: req.GetLabel(),
		Options: req.GetOptions(), Nonconforming: nonconformingOf(req.GetNonconforming()), RequestID: req.GetRequestId(),
		Since: req.GetSinceBackup(), From: req.GetFromBackup()})
	if err != nil {
		return nil, jobStatus(err, "")
	}
	return operationOf(j)
}

func (s *BackupService) StartImport(ctx context.Context, req *cb.StartImportRequest) (*longrunningpb.Operation, error) {
	if req.GetKeyRef() != "" {
		return nil, status.Error(codes.InvalidArgument, "key_ref: no longer accepted; a backup's key comes from the catalog")
	}
	if req.GetSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "source: no longer accepted; name a backup by its catalog id")
	}
	var replace bool
	switch req.GetMode() {
	case cb.ImportMode_IMPORT_MODE_UNSPECIFIED, cb.ImportMode_IMPORT_MODE_MERGE:
	case cb.ImportMode_IMPORT_MODE_REPLACE:
		replace = true
	default:
		return nil, status.Errorf(codes.InvalidArgument, "mode: %d is not an import mode", req.GetMode())
	}
	j, err := s.jobs.StartImport(ctx, principalName(ctx), jobs.ImportRequest{Owner: req.GetOwner(), SourceOwner: req.GetSourceOwner(),
		Backup: req.GetBackup(), RequestID: req.GetRequestId(), ValidateOnly: req.GetValidateOnly(), Replace: replace})
	if err != nil {
		return nil, jobStatus(err, req.GetBackup())
	}
	return operationOf(j)
}

func (s *BackupService) ListBackups(ctx context.Context, req *cb.ListBackupsRequest) (*cb.ListBackupsResponse, error) {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return nil, statusOf(err)
	}
	size, err := pagetoken.Size(req.GetPageSize())
	if err != nil {
		return nil, statusOf(err) // a BadRequest naming page_size
	}
	before := ""
	if req.GetPageToken() != "" {
		cursor, err := s.tokens.Open(principalName(ctx), pagetoken.Backups, pagetoken.OwnerBinding(req.GetOwner()), req.GetPageToken())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		before = string(cursor)
	}
	page, err := s.jobs.Catalog.ListBackups(ctx, req.GetOwner(), before, size)
	if err != nil {
		return nil, jobStatus(err, "")
	}
	holds, err := s.jobs.Catalog.Holds(ctx, req.GetOwner())
	if err != nil {
		return nil, jobStatus(err, "")
	}
	now := time.Now()
	resp := &cb.ListBackupsResponse{Backups: make([]*cb.Backup, 0, len(page))}
	for _, b := range page {
		resp.Backups = append(resp.Backups, heldBackupOf(ctx, b, holds, now))
	}
	if len(page) == size {
		resp.NextPageToken = s.tokens.Seal(principalName(ctx), pagetoken.Backups, pagetoken.OwnerBinding(req.GetOwner()), []byte(page[len(page)-1].ID))
	}
	return resp, nil
}

func (s *BackupService) GetBackup(ctx context.Context, req *cb.GetBackupRequest) (*cb.Backup, error) {
	b, err := s.jobs.Catalog.Backup(ctx, req.GetOwner(), req.GetBackup())
	if err != nil {
		return nil, jobStatus(err, req.GetBackup())
	}
	holds, err := s.jobs.Catalog.Holds(ctx, req.GetOwner())
	if err != nil {
		return nil, jobStatus(err, "")
	}
	return heldBackupOf(ctx, b, holds, time.Now()), nil
}

// heldBackupOf is backupOf with the hold in force that keeps b, if any.
func heldBackupOf(ctx context.Context, b store.Backup, holds []store.Hold, now time.Time) *cb.Backup {
	out := backupOf(b)
	if h := jobs.HoldOn(holds, b.ID, now); h != nil {
		out.Hold = legalHoldOf(ctx, *h, now)
	}
	return out
}

// legalHoldOf is h as the caller may see it: a principal without
// owners.hold (an exporter reading the catalog) sees the reasons of its
// own holds only, not another's case (issue 46, finding 9).
func legalHoldOf(ctx context.Context, h store.Hold, now time.Time) *cb.LegalHold {
	reason := h.Reason
	if p := auth.FromContext(ctx); !p.Has(auth.ScopeOwnersHold) && h.Principal != principalName(ctx) {
		reason = ""
	}
	out := &cb.LegalHold{Owner: h.Owner, Backup: h.Backup, Reason: reason, Principal: h.Principal, HoldId: h.ID,
		CreateTime: timestamppb.New(h.Created), InForce: h.InForce(now)}
	if !h.Until.IsZero() {
		out.EndTime = timestamppb.New(h.Until)
	}
	return out
}

func (s *BackupService) EraseOwner(ctx context.Context, req *cb.EraseOwnerRequest) (*longrunningpb.Operation, error) {
	j, err := s.jobs.StartErase(ctx, principalName(ctx), jobs.EraseRequest{Owner: req.GetOwner(), DryRun: req.GetDryRun(), RequestID: req.GetRequestId()})
	if err != nil {
		return nil, jobStatus(err, "")
	}
	return operationOf(j)
}

func (s *BackupService) GetOwnerErasure(ctx context.Context, req *cb.GetOwnerErasureRequest) (*cb.OwnerErasure, error) {
	e, err := s.jobs.OwnerErasure(ctx, req.GetOwner())
	if errors.Is(err, store.ErrNotFound) {
		return nil, status.Error(codes.NotFound, "owner: never erased")
	}
	if err != nil {
		return nil, jobStatus(err, "")
	}
	return ownerErasureOf(e), nil
}

func (s *BackupService) ReenableOwner(ctx context.Context, req *cb.ReenableOwnerRequest) (*cb.OwnerErasure, error) {
	e, err := s.jobs.ReenableOwner(ctx, principalName(ctx), req.GetOwner(), req.GetReason())
	if errors.Is(err, store.ErrNotFound) {
		return nil, status.Error(codes.NotFound, "owner: never erased, nothing to re-enable")
	}
	if err != nil {
		return nil, jobStatus(err, "")
	}
	return ownerErasureOf(e), nil
}

func ownerErasureOf(e store.ErasedOwner) *cb.OwnerErasure {
	return &cb.OwnerErasure{Owner: e.Owner, Operation: operationName(e.Job), EraseTime: timestamp(e.Erased), SchedulesSkip: e.Blocked(),
		ReenableTime: timestamp(e.Reenabled), ReenabledBy: e.ReenabledBy, Reason: e.Reason}
}

func (s *BackupService) SetLegalHold(ctx context.Context, req *cb.SetLegalHoldRequest) (*cb.LegalHold, error) {
	h := store.Hold{Owner: req.GetOwner(), Backup: req.GetBackup(), Reason: req.GetReason(), ID: req.GetHoldId()}
	if e := req.GetEndTime(); e != nil {
		if err := e.CheckValid(); err != nil {
			return nil, status.Error(codes.InvalidArgument, "end_time: not a valid timestamp")
		}
		if h.Until = e.AsTime(); h.Until.IsZero() {
			return nil, status.Error(codes.InvalidArgument, "end_time: 0001-01-01 is no end; omit end_time for a hold that lasts until released")
		}
	}
	h, err := s.jobs.Catalog.SetHold(ctx, principalName(ctx), h)
	if err != nil {
		return nil, jobStatus(err, req.GetBackup())
	}
	return legalHoldOf(ctx, h, time.Now()), nil
}

func (s *BackupService) ReleaseLegalHold(ctx context.Context, req *cb.ReleaseLegalHoldRequest) (*emptypb.Empty, error) {
	if _, err := s.jobs.Catalog.ReleaseHold(ctx, principalName(ctx), req.GetOwner(), req.GetBackup(), req.GetHoldId()); err != nil {
		if errors.Is(err, jobs.ErrHoldNotFound) {
			return nil, status.Error(codes.NotFound, "hold: not found")
		}
		return nil, jobStatus(err, req.GetBackup())
	}
	return &emptypb.Empty{}, nil
}

func (s *BackupService) ListLegalHolds(ctx context.Context, req *cb.ListLegalHoldsRequest) (*cb.ListLegalHoldsResponse, error) {
	if err := records.CheckOwner(req.GetOwner()); err != nil {
		return nil, statusOf(err)
	}
	holds, err := s.jobs.Catalog.Holds(ctx, req.GetOwner())
	if err != nil {
		return nil, jobStatus(err, "")
	}
	now := time.Now()
	resp := &cb.ListLegalHoldsResponse{Holds: make([]*cb.LegalHold, 0, len(holds))}
	for _, h := range holds {
		resp.Holds = append(resp.Holds, legalHoldOf(ctx, h, now))
	}
	return resp, nil
}

func (s *BackupService) GetKeyStatus(ctx context.Context, _ *cb.GetKeyStatusRequest) (*cb.KeyStatus, error) {
	st, err := s.jobs.Keys.KeyStatus(ctx)
	if err != nil {
		return nil, jobStatus(err, "")
	}
	out := &cb.KeyStatus{Current: st.Current, RetiredRows: st.Retired()}
	for _, u := range st.KEKs {
		out.Keks = append(out.Keks, &cb.KEKUse{Fingerprint: u.Fingerprint, State: u.State, OwnerKeys: u.OwnerKeys, LegacyBackups: u.LegacyBackups})
	}
	for _, r := range st.Retirements {
		kr := &cb.KEKRetirement{Fingerprint: r.Fingerprint, DueTime: timestamp(r.Due), RetireTime: timestamp(r.Retired),
			DestroyTime: timestamp(r.Destroyed), NextStep: r.NextStep}
		for _, j := range r.Jobs {
			kr.Erasures = append(kr.Erasures, operationName(j))
		}
		out.Retirements = append(out.Retirements, kr)
	}
	return out, nil
}

func (s *BackupService) DeleteBackup(ctx context.Context, req *cb.DeleteBackupRequest) (*emptypb.Empty, error) {
	if err := s.jobs.Catalog.DeleteBackup(ctx, principalName(ctx), req.GetOwner(), req.GetBackup()); err != nil {
		return nil, jobStatus(err, req.GetBackup())
	}
	return &emptypb.Empty{}, nil
}

func (s *BackupService) GetBackupKey(ctx context.Context, req *cb.GetBackupKeyRequest) (*cb.GetBackupKeyResponse, error) {
	key, err := s.jobs.Catalog.BackupKey(ctx, principalName(ctx), req.GetOwner(), req.GetBackup())
	if err != nil {
		return nil, jobStatus(err, req.GetBackup())
	}
	return &cb.GetBackupKeyResponse{Key: key}, nil
}

func (s *BackupService) VerifyBackup(ctx context.Context, req *cb.VerifyBackupRequest) (*cb.Backup, error) {
	b, err := s.jobs.Verifier.VerifyBackup(ctx, principalName(ctx), req.GetOwner(), req.GetBackup())
	if err != nil {
		return nil, jobStatus(err, req.GetBackup())
	}
	return backupOf(b), nil
}

func (s *BackupService) PlanRetention(ctx context.Context, req *cb.PlanRetentionRequest) (*cb.PlanRetentionResponse, error) {
	var rules *jobs.Retention
	if r := req.GetRules(); r != nil {
		rules = &jobs.Retention{Last: int(r.GetLast()), Daily: int(r.GetDaily()), Weekly: int(r.GetWeekly()), Monthly: int(r.GetMonthly()), Yearly: int(r.GetYearly())}
	}
	plan, err := s.jobs.Catalog.PlanRetention(ctx, req.GetOwner(), req.GetSchedule(), rules)
	if err != nil {
		return nil, jobStatus(err, "")
	}
	r := plan.Rules
	resp := &cb.PlanRetentionResponse{Rules: &cb.RetentionRules{Last: int32(r.Last), Daily: int32(r.Daily), Weekly: int32(r.Weekly), Monthly: int32(r.Monthly), Yearly: int32(r.Yearly)}}
	for _, k := range plan.Keep {
		resp.Decisions = append(resp.Decisions, &cb.RetentionDecision{Backup: backupOf(k.Backup), Keep: true, Rules: k.Rules})
	}
	for _, b := range plan.Remove {
		resp.Decisions = append(resp.Decisions, &cb.RetentionDecision{Backup: backupOf(b)})
	}
	// Newest first, kept and deleted together: ids sort by creation.
	slices.SortStableFunc(resp.Decisions, func(a, b *cb.RetentionDecision) int {
		return strings.Compare(b.GetBackup().GetId(), a.GetBackup().GetId())
	})
	return resp, nil
}

var backupStates = map[string]cb.BackupState{
	store.BackupWriting: cb.BackupState_BACKUP_STATE_WRITING, store.BackupComplete: cb.BackupState_BACKUP_STATE_COMPLETE,
	store.BackupDeleting: cb.BackupState_BACKUP_STATE_DELETING,
}

// backupOf is a catalog row as the API shows it: never its wrapped key.
func backupOf(b store.Backup) *cb.Backup {
	out := &cb.Backup{Id: b.ID, Owner: b.Owner, State: backupStates[b.State], Label: b.Label,
		Object: &cb.ObjectLocation{Bucket: b.Bucket, Key: b.ObjectKey}, Principal: b.Principal, Schedule: b.Schedule, BaseBackup: b.Base,
		CreateTime: timestamppb.New(b.Created)}
	if b.JobID != "" {
		out.Operation = operationName(b.JobID)
	}
	opts := &dsb.ArchiveOptions{}
	if proto.Unmarshal(b.Options, opts) == nil && len(b.Options) > 0 {
		out.Options = opts
	}
	if b.State == store.BackupComplete {
		out.Summary = &cb.ExportSummary{Groups: b.Summary.Groups, Messages: b.Summary.Messages, ConsentRecords: b.Summary.Consent,
			ArchiveBytes: b.Summary.Length, Sha256: b.Summary.SHA256, ExportedAtNs: b.Summary.ExportedAtNs}
		out.CompleteTime = timestamppb.New(b.Completed)
	}
	if !b.Verified.IsZero() {
		out.VerifyTime, out.VerifyProblem = timestamppb.New(b.Verified), b.VerifyProblem
	}
	return out
}

func operationOf(j store.Job) (*longrunningpb.Operation, error) {
	op, err := operation(j)
	if err != nil {
		return nil, hide(codes.Internal, fault.ReasonInternal, msgInternal, err, nil)
	}
	return op, nil
}

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
