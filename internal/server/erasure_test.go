package server

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pv "github.com/contentbackup/contentbackup/api/contentbackup/persistence/v1"
	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

// TestEraseOwnerOverTCP (issue 37), on each engine over TLS: admin does
// not imply owners.erase; an erasing principal bound to alice cannot
// erase bob; a legal hold (owners.hold) shows on ListBackups and refuses
// the erasure until released; the erasure's operation is visible to its
// scope only and cannot be deleted (it is the audit record); afterwards
// alice has nothing and bob everything; the key status is admin's.
func TestEraseOwnerOverTCP(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := t.Context()
			p := startPerimeter(t, e.Open(t), false, nil)
			ops := p.as(t, opsToken)
			populate(t, cb.NewConversationServiceClient(ops), "alice")
			populate(t, cb.NewConversationServiceClient(ops), "bob")
			bobBefore := snapshotOf(t, p, "bob")
			alice := p.as(t, aliceToken)
			op, err := cb.NewBackupServiceClient(alice).StartExport(ctx, exportJob("alice", "evidence"))
			if err != nil {
				t.Fatal(err)
			}
			backupID := exportResult(t, waitOp(t, alice, op.GetName())).GetBackup()

			_, err = cb.NewBackupServiceClient(ops).EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "alice"})
			wantStatus(t, "EraseOwner as admin", err, codes.PermissionDenied)
			dpo := p.as(t, p.idp.valid(t, "alice", "owners.erase"))
			_, err = cb.NewBackupServiceClient(dpo).EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "bob"})
			wantStatus(t, "EraseOwner of bob by alice's eraser", err, codes.PermissionDenied)

			legal := cb.NewBackupServiceClient(p.as(t, p.idp.valid(t, "alice", "owners.hold")))
			_, err = legal.SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: "alice", Backup: backupID})
			wantStatus(t, "a hold without a reason", err, codes.InvalidArgument)
			// Times the store cannot hold are refused, never stored wrapped
			// (issue 46, finding 5: a year-2500 end read back as 1830 and
			// retention deleted the "held" backup), and 0001-01-01 is no
			// indefinite hold (finding 9).
			for name, end := range map[string]time.Time{"after 2262": time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC), "0001-01-01": {}} {
				_, err = legal.SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: "alice", Backup: backupID, Reason: "far", EndTime: timestamppb.New(end)})
				wantStatus(t, "a hold ending "+name, err, codes.InvalidArgument)
			}
			if list, _ := cb.NewBackupServiceClient(alice).ListBackups(ctx, &cb.ListBackupsRequest{Owner: "alice"}); list.GetBackups()[0].GetHold() != nil {
				t.Fatalf("a refused hold was stored: %v", list.GetBackups()[0].GetHold())
			}
			hold, err := legal.SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: "alice", Backup: backupID, Reason: "case 2026-17"})
			if err != nil || !hold.GetInForce() || hold.GetPrincipal() != "jwt:user-alice" || len(hold.GetHoldId()) != 32 {
				t.Fatalf("SetLegalHold: %v, %v", hold, err)
			}
			// A second holder's hold is a record of its own (finding 9): a
			// release that names neither is refused, one that names it
			// leaves the first; a reader without owners.hold sees no other
			// holder's reason.
			regulator := cb.NewBackupServiceClient(p.as(t, p.idp.valid(t, "alice", "owners.hold")))
			short, err := regulator.SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: "alice", Backup: backupID, Reason: "regulator's inquiry",
				EndTime: timestamppb.New(time.Now().Add(time.Hour))})
			if err != nil || short.GetHoldId() == hold.GetHoldId() {
				t.Fatalf("a second hold on the backup: %v, %v", short, err)
			}
			_, err = legal.ReleaseLegalHold(ctx, &cb.ReleaseLegalHoldRequest{Owner: "alice", Backup: backupID})
			wantStatus(t, "a release naming no hold among two", err, codes.FailedPrecondition)
			_, err = legal.SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: "alice", Backup: backupID, Reason: "x", HoldId: "not-an-id"})
			wantStatus(t, "a malformed hold_id", err, codes.InvalidArgument)
			seen, err := cb.NewBackupServiceClient(p.as(t, exporterToken)).ListLegalHolds(ctx, &cb.ListLegalHoldsRequest{Owner: "alice"})
			if err != nil || len(seen.GetHolds()) != 2 || seen.GetHolds()[0].GetReason() != "" || seen.GetHolds()[1].GetReason() != "" {
				t.Fatalf("ListLegalHolds as the exporter: %v, %v; want two holds, no reasons", seen, err)
			}
			if _, err := regulator.ReleaseLegalHold(ctx, &cb.ReleaseLegalHoldRequest{Owner: "alice", Backup: backupID, HoldId: short.GetHoldId()}); err != nil {
				t.Fatal(err)
			}
			list, err := cb.NewBackupServiceClient(alice).ListBackups(ctx, &cb.ListBackupsRequest{Owner: "alice"})
			if err != nil || len(list.GetBackups()) != 1 || list.GetBackups()[0].GetHold().GetReason() != "case 2026-17" {
				t.Fatalf("ListBackups does not show the hold: %v, %v", list, err)
			}
			_, err = cb.NewBackupServiceClient(alice).DeleteBackup(ctx, &cb.DeleteBackupRequest{Owner: "alice", Backup: backupID})
			wantStatus(t, "DeleteBackup of a held backup", err, codes.FailedPrecondition)
			_, err = cb.NewBackupServiceClient(dpo).EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "alice"})
			wantStatus(t, "EraseOwner under a hold", err, codes.FailedPrecondition)
			if _, err := legal.ReleaseLegalHold(ctx, &cb.ReleaseLegalHoldRequest{Owner: "alice", Backup: backupID}); err != nil {
				t.Fatal(err)
			}
			_, err = legal.ReleaseLegalHold(ctx, &cb.ReleaseLegalHoldRequest{Owner: "alice", Backup: backupID})
			wantStatus(t, "releasing a released hold", err, codes.NotFound)

			erase, err := cb.NewBackupServiceClient(dpo).EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "alice", RequestId: "gdpr-1"})
			if err != nil {
				t.Fatal(err)
			}
			done := waitOp(t, dpo, erase.GetName())
			result := &cb.EraseOwnerResult{}
			if done.GetError() != nil || done.GetResponse().UnmarshalTo(result) != nil || !result.GetKeyDestroyed() || result.GetBackups() != 1 {
				t.Fatalf("the erasure: %v %v", done.GetError(), result)
			}
			// The exporter holds alice's archive scope, not erase: the
			// operation does not exist for it.
			_, err = longrunningpb.NewOperationsClient(p.as(t, exporterToken)).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: erase.GetName()})
			wantStatus(t, "the erasure's operation as the exporter", err, codes.NotFound)
			_, err = longrunningpb.NewOperationsClient(dpo).DeleteOperation(ctx, &longrunningpb.DeleteOperationRequest{Name: erase.GetName()})
			wantStatus(t, "deleting the erasure's record", err, codes.FailedPrecondition)
			again, err := cb.NewBackupServiceClient(dpo).EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "alice", RequestId: "gdpr-1"})
			if err != nil || again.GetName() != erase.GetName() {
				t.Fatalf("a repeated request id: %v, %v; want the first operation", again.GetName(), err)
			}

			groups, err := cb.NewConversationServiceClient(ops).ListGroups(ctx, &cb.ListGroupsRequest{Owner: "alice"})
			if err != nil || len(groups.GetGroups()) != 0 {
				t.Fatalf("alice's groups after the erasure: %d, %v", len(groups.GetGroups()), err)
			}
			backups, err := cb.NewBackupServiceClient(alice).ListBackups(ctx, &cb.ListBackupsRequest{Owner: "alice"})
			if err != nil || len(backups.GetBackups()) != 0 {
				t.Fatalf("alice's backups after the erasure: %v, %v", backups, err)
			}
			if after := snapshotOf(t, p, "bob"); after != bobBefore {
				t.Error("erasing alice changed bob's data")
			}

			// The name stays erased for schedules until re-enabled, with a
			// reason, by a principal that may erase it (finding 6).
			rec, err := cb.NewBackupServiceClient(dpo).GetOwnerErasure(ctx, &cb.GetOwnerErasureRequest{Owner: "alice"})
			if err != nil || !rec.GetSchedulesSkip() || rec.GetOperation() != erase.GetName() || rec.GetEraseTime() == nil {
				t.Fatalf("GetOwnerErasure: %v, %v", rec, err)
			}
			_, err = cb.NewBackupServiceClient(ops).ReenableOwner(ctx, &cb.ReenableOwnerRequest{Owner: "alice", Reason: "new subscriber"})
			wantStatus(t, "ReenableOwner as admin", err, codes.PermissionDenied)
			_, err = cb.NewBackupServiceClient(dpo).ReenableOwner(ctx, &cb.ReenableOwnerRequest{Owner: "alice"})
			wantStatus(t, "ReenableOwner without a reason", err, codes.InvalidArgument)
			bobEraser := p.as(t, p.idp.valid(t, "bob", "owners.erase"))
			_, err = cb.NewBackupServiceClient(bobEraser).GetOwnerErasure(ctx, &cb.GetOwnerErasureRequest{Owner: "bob"})
			wantStatus(t, "GetOwnerErasure of a name never erased", err, codes.NotFound)
			_, err = cb.NewBackupServiceClient(bobEraser).ReenableOwner(ctx, &cb.ReenableOwnerRequest{Owner: "alice", Reason: "x"})
			wantStatus(t, "ReenableOwner of alice by bob's eraser", err, codes.PermissionDenied)
			rec, err = cb.NewBackupServiceClient(dpo).ReenableOwner(ctx, &cb.ReenableOwnerRequest{Owner: "alice", Reason: "the number now belongs to a new subscriber"})
			if err != nil || rec.GetSchedulesSkip() || rec.GetReenabledBy() != "jwt:user-alice" || rec.GetReenableTime() == nil {
				t.Fatalf("ReenableOwner: %v, %v", rec, err)
			}

			// The completion point (issue 46, finding 1): the erasure waits
			// on the KEK that wrapped alice's key until the key worker has
			// rotated it away, rewrapped bob's key and destroyed it.
			st, err := cb.NewBackupServiceClient(ops).GetKeyStatus(ctx, &cb.GetKeyStatusRequest{})
			if err != nil || len(st.GetCurrent()) != 16 || st.GetRetiredRows() != 0 || len(st.GetRetirements()) != 1 ||
				st.GetRetirements()[0].GetFingerprint() != st.GetCurrent() || st.GetRetirements()[0].GetErasures()[0] != erase.GetName() ||
				st.GetRetirements()[0].GetNextStep() == "" {
				t.Fatalf("GetKeyStatus as admin after the erasure: %v, %v", st, err)
			}
			if got := eraseResultOf(t, dpo, erase.GetName()); got.GetUnreadableSince() != nil || len(got.GetWaitingOnKeks()) != 1 || got.GetWaitingOnKeks()[0] != st.GetCurrent() {
				t.Fatalf("the erasure before the key worker's pass: %v; want it waiting on KEK %s", got, st.GetCurrent())
			}
			if _, err := p.jobs.Keys.MaintainKeys(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if got := eraseResultOf(t, dpo, erase.GetName()); got.GetUnreadableSince() == nil || len(got.GetWaitingOnKeks()) != 0 {
				t.Fatalf("the erasure after the key worker's pass: %v; want its completion point", got)
			}
			after, err := cb.NewBackupServiceClient(ops).GetKeyStatus(ctx, &cb.GetKeyStatusRequest{})
			if err != nil || after.GetCurrent() == st.GetCurrent() || after.GetRetiredRows() != 0 || after.GetRetirements()[0].GetDestroyTime() == nil {
				t.Fatalf("GetKeyStatus after the key worker's pass: %v, %v; want a new KEK and the old one destroyed", after, err)
			}
			if after := snapshotOf(t, p, "bob"); after != bobBefore {
				t.Error("the rotation changed bob's data")
			}
			_, err = cb.NewBackupServiceClient(alice).GetKeyStatus(ctx, &cb.GetKeyStatusRequest{})
			wantStatus(t, "GetKeyStatus as alice", err, codes.PermissionDenied)
		})
	}
}

// TestErasureFenceOverTCP (issue 46, findings 2, 3 and 4), on each
// engine: while an erasure of alice runs (here on another replica: its
// job stored running), an export of alice, an import into her, an import
// from her backup into another owner and a hold on her are each refused
// FAILED_PRECONDITION, and the hold is not stored; an erasure started
// while an import from her backup into carol runs stops it first.
func TestErasureFenceOverTCP(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := t.Context()
			p := startPerimeter(t, e.Open(t), false, nil)
			ops := p.as(t, opsToken)
			populate(t, cb.NewConversationServiceClient(ops), "alice")
			alice := cb.NewBackupServiceClient(p.as(t, aliceToken))
			op, err := alice.StartExport(ctx, exportJob("alice", "before"))
			if err != nil {
				t.Fatal(err)
			}
			backupID := exportResult(t, waitOp(t, p.as(t, aliceToken), op.GetName())).GetBackup()

			other := func(id, kind, owner, source string, spec proto.Message) {
				t.Helper()
				raw, err := proto.Marshal(spec)
				if err != nil {
					t.Fatal(err)
				}
				now := time.Now()
				if err := p.store.CreateJob(ctx, store.Job{ID: id, Kind: kind, Owner: owner, SourceOwner: source, Principal: "jwt:other-replica",
					State: store.JobRunning, Spec: raw, LeaseUntil: now.Add(time.Hour), Created: now, Updated: now}); err != nil {
					t.Fatal(err)
				}
			}
			end := func(id string) {
				t.Helper()
				if err := p.store.FinishJob(ctx, id, 1, store.JobEnd{State: store.JobFailed, At: time.Now(), ErrorCode: int32(codes.Aborted), ErrorMessage: "stopped"}); err != nil {
					t.Fatal(err)
				}
			}

			other(jobs.NewID(time.Now()), store.JobErase, "alice", "", &pv.EraseSpec{Owner: "alice"})
			_, err = alice.StartExport(ctx, exportJob("alice", "during"))
			wantStatus(t, "an export of an owner being erased", err, codes.FailedPrecondition)
			_, err = alice.StartImport(ctx, &cb.StartImportRequest{Owner: "alice", Backup: backupID})
			wantStatus(t, "an import into an owner being erased", err, codes.FailedPrecondition)
			_, err = cb.NewBackupServiceClient(ops).StartImport(ctx, &cb.StartImportRequest{Owner: "carol", SourceOwner: "alice", Backup: backupID})
			wantStatus(t, "an import from the backup of an owner being erased", err, codes.FailedPrecondition)
			legal := cb.NewBackupServiceClient(p.as(t, p.idp.valid(t, "alice", "owners.hold")))
			_, err = legal.SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: "alice", Reason: "too late"})
			wantStatus(t, "a hold on an owner being erased", err, codes.FailedPrecondition)
			if holds, err := p.store.ListHolds(ctx, "alice"); err != nil || len(holds) != 0 {
				t.Fatalf("a refused hold was stored: %v, %v", holds, err)
			}
			erasing, err := p.store.RunningErasure(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			end(erasing)

			// An import from her backup into carol runs on another
			// replica: the erasure asks it to stop, waits until it has,
			// then erases.
			migrating := jobs.NewID(time.Now())
			other(migrating, store.JobImport, "carol", "alice", &pv.ImportSpec{Owner: "carol", SourceOwner: "alice", Backup: backupID})
			dpoConn := p.as(t, p.idp.valid(t, "alice", "owners.erase"))
			dpo := cb.NewBackupServiceClient(dpoConn)
			erase, err := dpo.EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "alice"})
			if err != nil {
				t.Fatalf("an erasure while an import reads the owner's backup: %v", err)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				j, err := p.store.GetJob(ctx, migrating)
				if err != nil {
					t.Fatal(err)
				}
				if j.CancelRequested {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the erasure did not ask the import from the owner's backup to stop")
				}
			}
			if op, err := longrunningpb.NewOperationsClient(dpoConn).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: erase.GetName()}); err != nil || op.GetDone() {
				t.Fatalf("the erasure ended before the import it waits for: %v, %v", op, err)
			}
			if _, err := p.store.GetOwnerKey(ctx, "alice"); err != nil {
				t.Fatalf("the erasure destroyed the key while the import ran: %v", err)
			}
			end(migrating) // the other replica's import ends, cancelled
			done := waitOp(t, dpoConn, erase.GetName())
			result := &cb.EraseOwnerResult{}
			if done.GetError() != nil || done.GetResponse().UnmarshalTo(result) != nil || result.GetJobsCancelled() != 1 {
				t.Fatalf("the erasure: %v, %v", done.GetError(), result)
			}
		})
	}
}

// eraseResultOf reads a finished erasure's result through GetOperation.
func eraseResultOf(t *testing.T, conn *grpc.ClientConn, name string) *cb.EraseOwnerResult {
	t.Helper()
	op, err := longrunningpb.NewOperationsClient(conn).GetOperation(t.Context(), &longrunningpb.GetOperationRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	result := &cb.EraseOwnerResult{}
	if err := op.GetResponse().UnmarshalTo(result); err != nil {
		t.Fatal(err)
	}
	return result
}

// TestErasureRaceOverTCP (issue 46's race test), on each engine: while
// exports of alice, imports into her, imports from her backup into
// others, holds on her (each released at once) and schedule ticks for her
// are started in loops, her erasure is started (again while a hold
// stands in its way). Afterwards no backup sealed by her erased key is in
// the catalog or the bucket, the erasure stopped what ran, and every
// refusal the erasure caused was FAILED_PRECONDITION "being erased".
func TestErasureRaceOverTCP(t *testing.T) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := t.Context()
			p := startPerimeter(t, e.Open(t), false, nil)
			ops := p.as(t, opsToken)
			populate(t, cb.NewConversationServiceClient(ops), "alice")
			admin := cb.NewBackupServiceClient(ops)
			op, err := admin.StartExport(ctx, exportJob("alice", "before"))
			if err != nil {
				t.Fatal(err)
			}
			backupID := exportResult(t, waitOp(t, ops, op.GetName())).GetBackup()
			oldKey, err := p.store.GetOwnerKey(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			policy, err := jobs.ParseSchedules([]byte("schedules:\n  - name: often\n    cron: \"@every 1m\"\n    owners: [alice]\n    bucket: local\n    keep: 100\n"))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := jobs.NewScheduler(ctx, p.jobs, policy)
			if err != nil {
				t.Fatal(err)
			}
			legal := cb.NewBackupServiceClient(p.as(t, p.idp.valid(t, "alice", "owners.hold")))

			var mu sync.Mutex
			codesSeen := map[codes.Code]int{}
			var unexpected []error
			erasingRefusals := 0
			note := func(what string, err error) {
				mu.Lock()
				defer mu.Unlock()
				c := status.Code(err)
				codesSeen[c]++
				switch {
				case err == nil:
				case c == codes.FailedPrecondition && strings.Contains(err.Error(), "being erased"):
					erasingRefusals++
				case c == codes.FailedPrecondition:
					// a hold standing at that instant; the backup's key
					// already destroyed when the import opened it
				case c == codes.AlreadyExists, c == codes.ResourceExhausted, c == codes.NotFound:
					// another export of alice runs; her queue is full; the
					// backup imported from is erased
				default:
					unexpected = append(unexpected, fmt.Errorf("%s: %w", what, err))
				}
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			loop := func(fn func(n int)) {
				wg.Go(func() {
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						fn(n)
						time.Sleep(2 * time.Millisecond)
					}
				})
			}
			loop(func(int) {
				_, err := admin.StartExport(ctx, exportJob("alice", "racing"))
				note("export", err)
			})
			loop(func(int) {
				_, err := admin.StartImport(ctx, &cb.StartImportRequest{Owner: "alice", Backup: backupID})
				note("import into alice", err)
			})
			loop(func(n int) {
				_, err := admin.StartImport(ctx, &cb.StartImportRequest{Owner: fmt.Sprintf("carol-%d", n%3), SourceOwner: "alice", Backup: backupID})
				note("import from alice", err)
			})
			loop(func(int) {
				h, err := legal.SetLegalHold(ctx, &cb.SetLegalHoldRequest{Owner: "alice", Reason: "racing matter"})
				note("hold", err)
				if err == nil {
					_, err := legal.ReleaseLegalHold(ctx, &cb.ReleaseLegalHoldRequest{Owner: "alice", HoldId: h.GetHoldId()})
					if status.Code(err) != codes.NotFound {
						note("release", err)
					}
				}
			})
			tick := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			loop(func(n int) { sc.Fire(ctx, policy.Schedules[0], tick.Add(time.Duration(n)*time.Minute)) })

			time.Sleep(100 * time.Millisecond)
			dpoConn := p.as(t, p.idp.valid(t, "alice", "owners.erase"))
			dpo := cb.NewBackupServiceClient(dpoConn)
			var result *cb.EraseOwnerResult
			for attempt := 0; result == nil; attempt++ {
				if attempt == 200 {
					t.Fatal("no erasure succeeded in 200 attempts")
				}
				erase, err := dpo.EraseOwner(ctx, &cb.EraseOwnerRequest{Owner: "alice"})
				if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "legal hold") {
					continue // a racing hold stood at that instant
				}
				if err != nil {
					t.Fatal(err)
				}
				done := waitOp(t, dpoConn, erase.GetName())
				if done.GetError() != nil {
					if strings.Contains(done.GetError().GetMessage(), "legal hold") {
						continue
					}
					t.Fatalf("the erasure failed: %v", done.GetError())
				}
				result = &cb.EraseOwnerResult{}
				if err := done.GetResponse().UnmarshalTo(result); err != nil {
					t.Fatal(err)
				}
			}
			close(stop)
			wg.Wait()
			if len(unexpected) > 0 {
				t.Fatalf("calls refused otherwise than FAILED_PRECONDITION: %v", unexpected)
			}
			t.Logf("codes while racing: %v; refused as being erased: %d; the erasure cancelled %d jobs", codesSeen, erasingRefusals, result.GetJobsCancelled())
			// Jobs started after the erasure ended are a new owner's: let
			// them end, then look for anything sealed by the old key.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				ids, err := p.store.RunningJobsFor(ctx, "alice")
				if err != nil {
					t.Fatal(err)
				}
				if len(ids) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("jobs still running: %v", ids)
				}
			}
			backups, err := p.store.ListBackups(ctx, store.BackupQuery{Owner: "alice", Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range backups {
				if b.OwnerKeyID == oldKey.KeyID {
					t.Fatalf("backup %s of the erased owner survives, sealed by the erased key", b.ID)
				}
			}
			// Every object under alice's directories is a catalog row's of
			// the new owner.
			known := map[string]bool{}
			for _, b := range backups {
				known[b.ObjectKey] = true
			}
			err = filepath.WalkDir(p.jobsDir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(p.jobsDir, path)
				rel = filepath.ToSlash(rel)
				if strings.Contains(rel, "alice/") && strings.HasSuffix(rel, jobs.ArchiveSuffix) && !known[rel] {
					return fmt.Errorf("object %s under alice's directory belongs to no backup of the new owner", rel)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
