package server

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestBackupsBelongToTheirOwner is the attack of the owner-bound catalog
// issue over TCP, on both engines: bob, holding both archive scopes for
// his own owner only, cannot import, read, fetch the key of, delete or
// list alice's backup by any name, and cannot tell it from a backup that
// does not exist; restoring it into another owner takes archive.migrate.
func TestBackupsBelongToTheirOwner(t *testing.T) {
	forEachPerimeter(t, func(t *testing.T, p *perimeter) {
		ctx := t.Context()
		populate(t, cb.NewConversationServiceClient(p.as(t, opsToken)), "alice")
		alice := cb.NewBackupServiceClient(p.as(t, aliceToken))
		req := exportJob("alice", "mine")
		req.RequestId = "shared-request-id"
		op, err := alice.StartExport(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		result := exportResult(t, waitOp(t, p.as(t, aliceToken), op.GetName()))
		id, unknown := result.GetBackup(), jobs.NewID(time.Now())
		bobConn := p.as(t, p.idp.valid(t, "bob", "archive.export archive.import conversations.read"))
		bob := cb.NewBackupServiceClient(bobConn)

		// Under bob's own owner: alice's id and an unknown id are one
		// NOT_FOUND, the same message but for the id sent.
		calls := map[string]func(owner, id string) error{
			"StartImport": func(o, id string) error {
				_, err := bob.StartImport(ctx, &cb.StartImportRequest{Owner: o, Backup: id})
				return err
			},
			"GetBackup": func(o, id string) error {
				_, err := bob.GetBackup(ctx, &cb.GetBackupRequest{Owner: o, Backup: id})
				return err
			},
			"GetBackupKey": func(o, id string) error {
				_, err := bob.GetBackupKey(ctx, &cb.GetBackupKeyRequest{Owner: o, Backup: id})
				return err
			},
			"DeleteBackup": func(o, id string) error {
				_, err := bob.DeleteBackup(ctx, &cb.DeleteBackupRequest{Owner: o, Backup: id})
				return err
			},
		}
		same := func(a, b error, aID, bID string) bool {
			return status.Code(a) == status.Code(b) &&
				strings.ReplaceAll(status.Convert(a).Message(), aID, "ID") == strings.ReplaceAll(status.Convert(b).Message(), bID, "ID")
		}
		for name, call := range calls {
			theirs, none := call("bob", id), call("bob", unknown)
			if status.Code(theirs) != codes.NotFound || !same(theirs, none, id, unknown) {
				t.Errorf("%s of alice's backup under bob: %v; of an unknown one: %v; want one NOT_FOUND", name, theirs, none)
			}
			// Naming alice: refused at the door, whatever the id.
			theirs, none = call("alice", id), call("alice", unknown)
			if status.Code(theirs) != codes.PermissionDenied || !same(theirs, none, id, unknown) {
				t.Errorf("%s naming alice: %v; with an unknown id: %v; want one PERMISSION_DENIED", name, theirs, none)
			}
			// Path forms of the id are malformed, never a lookup.
			for _, bad := range []string{"../" + id, "alice/" + id, strings.ToUpper(id), "%2e%2e%2f" + id} {
				if err := call("bob", bad); status.Code(err) != codes.InvalidArgument {
					t.Errorf("%s of %q: %v, want INVALID_ARGUMENT", name, bad, err)
				}
			}
		}
		_, err = bob.StartImport(ctx, &cb.StartImportRequest{Owner: "bob", SourceOwner: "alice", Backup: id})
		wantStatus(t, "bob naming alice as the source", err, codes.PermissionDenied)
		_, err = bob.StartImport(ctx, &cb.StartImportRequest{Owner: "bob", Source: result.GetArchive()})
		wantStatus(t, "bob naming alice's object", err, codes.InvalidArgument)
		_, err = bob.StartImport(ctx, &cb.StartImportRequest{Owner: "bob", KeyRef: "main", Backup: unknown})
		wantStatus(t, "bob naming a key ref", err, codes.InvalidArgument)
		if l, err := bob.ListBackups(ctx, &cb.ListBackupsRequest{Owner: "bob"}); err != nil || len(l.GetBackups()) != 0 {
			t.Errorf("bob lists %v, %v", l.GetBackups(), err)
		}
		if g, err := cb.NewConversationServiceClient(bobConn).ListGroups(ctx, &cb.ListGroupsRequest{Owner: "bob"}); err != nil || len(g.GetGroups()) != 0 {
			t.Errorf("bob's store after the attack: %v, %v", g.GetGroups(), err)
		}
		// A request id names a job only among its owner's: bob sending
		// alice's gets a job of his own, never hers.
		populate(t, cb.NewConversationServiceClient(p.as(t, opsToken)), "bob")
		bobReq := exportJob("bob", "his")
		bobReq.RequestId = "shared-request-id"
		bobOp, err := bob.StartExport(ctx, bobReq)
		if err != nil || bobOp.GetName() == op.GetName() {
			t.Errorf("bob's start with alice's request id: %v, %v; want a job of his own", bobOp.GetName(), err)
		}
		if err == nil {
			waitOp(t, bobConn, bobOp.GetName())
		}

		// A principal holding both owners still needs archive.migrate to
		// restore one into the other; the operator (admin) may.
		both := cb.NewBackupServiceClient(p.as(t, p.idp.valid(t, "alice", "archive.import")))
		_, err = both.StartImport(ctx, &cb.StartImportRequest{Owner: "alice", SourceOwner: "carol", Backup: id})
		wantStatus(t, "a principal without carol naming her", err, codes.PermissionDenied)
		ops := p.as(t, opsToken)
		mig, err := cb.NewBackupServiceClient(ops).StartImport(ctx, &cb.StartImportRequest{Owner: "carol", SourceOwner: "alice", Backup: id})
		if err != nil {
			t.Fatalf("operator migration: %v", err)
		}
		if done := waitOp(t, ops, mig.GetName()); done.GetError() != nil {
			t.Fatalf("migration job: %v", done.GetError())
		}

		// alice sees, keys and deletes her own; then it is gone for her too.
		if l, err := alice.ListBackups(ctx, &cb.ListBackupsRequest{Owner: "alice"}); err != nil || len(l.GetBackups()) != 1 || l.GetBackups()[0].GetId() != id {
			t.Errorf("alice lists %v, %v", l.GetBackups(), err)
		}
		if k, err := alice.GetBackupKey(ctx, &cb.GetBackupKeyRequest{Owner: "alice", Backup: id}); err != nil || len(k.GetKey()) != 32 {
			t.Errorf("alice's key: %v", err)
		}
		if _, err := alice.DeleteBackup(ctx, &cb.DeleteBackupRequest{Owner: "alice", Backup: id}); err != nil {
			t.Fatalf("alice deletes her backup: %v", err)
		}
		_, err = alice.GetBackup(ctx, &cb.GetBackupRequest{Owner: "alice", Backup: id})
		wantStatus(t, "GetBackup after delete", err, codes.NotFound)
	})
}

// importHeld holds every import's group merge for one owner while hold
// is set, until release is closed: an owner's slow imports.
type importHeld struct {
	store.Store
	owner   string
	hold    atomic.Bool
	reached chan struct{}
	once    sync.Once
	release chan struct{}
}

func (h *importHeld) MergeGroups(ctx context.Context, owner string, groups []*gb.GroupSave) ([]store.Outcome, error) {
	if owner == h.owner && h.hold.Load() {
		h.once.Do(func() { close(h.reached) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.Store.MergeGroups(ctx, owner, groups)
}

// TestBackupJobsFairAcrossOwners: alice floods the server with slow
// imports; she runs her share, the rest of hers wait queued, and bob's
// export takes a free slot at once and finishes while hers are held.
func TestBackupJobsFairAcrossOwners(t *testing.T) {
	held := &importHeld{Store: enginetest.SQLite(t), owner: "alice", reached: make(chan struct{}), release: make(chan struct{})}
	jobsCfg, _ := testJobs(t)
	jobsCfg.MaxRunning, jobsCfg.MaxRunningPerOwner, jobsCfg.MaxQueuedPerOwner = 2, 1, 4
	addr := serveTCP(t, withJobs(Config{Store: held}, jobsCfg), nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	populate(t, cb.NewConversationServiceClient(conn), "alice")
	populate(t, cb.NewConversationServiceClient(conn), "bob")
	backups := cb.NewBackupServiceClient(conn)
	op, err := backups.StartExport(t.Context(), exportJob("alice", ""))
	if err != nil {
		t.Fatal(err)
	}
	id := exportResult(t, waitOp(t, conn, op.GetName())).GetBackup()

	held.hold.Store(true)
	var flood []*longrunningpb.Operation
	for range 5 {
		op, err := backups.StartImport(t.Context(), &cb.StartImportRequest{Owner: "alice", Backup: id})
		if status.Code(err) == codes.ResourceExhausted {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, op)
	}
	if len(flood) != 5 {
		// 1 running and 4 queued fill alice's share and queue exactly.
		t.Fatalf("alice started %d imports, want 5 (1 running, 4 queued)", len(flood))
	}
	if _, err := backups.StartImport(t.Context(), &cb.StartImportRequest{Owner: "alice", Backup: id}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("alice's sixth import: %v, want RESOURCE_EXHAUSTED past her queue", err)
	}
	<-held.reached
	bob, err := backups.StartExport(t.Context(), exportJob("bob", ""))
	if err != nil {
		t.Fatalf("bob's export while alice floods: %v", err)
	}
	md := &cb.JobMetadata{}
	if err := bob.GetMetadata().UnmarshalTo(md); err != nil || md.GetPhase() == cb.JobPhase_JOB_PHASE_QUEUED {
		t.Errorf("bob's export was queued behind alice: %v %v", md, err)
	}
	exportResult(t, waitOp(t, conn, bob.GetName()))
	close(held.release)
	for _, op := range flood {
		if done := waitOp(t, conn, op.GetName()); done.GetError() != nil {
			t.Errorf("alice's import %s: %v", op.GetName(), done.GetError())
		}
	}
}
