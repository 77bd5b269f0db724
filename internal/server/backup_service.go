package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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
