package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestE2EOwnerQuotaOverTCP (issue 33, finding 6): an export that passes
// its owner's quota as it writes ends RESOURCE_EXHAUSTED naming the
// quota, and commits nothing.
func TestE2EOwnerQuotaOverTCP(t *testing.T) {
	jc, _ := testJobs(t)
	jc.OwnerQuota = 1 // any one backup passes it
	addr := serveTCP(t, withJobs(Config{Store: enginetest.SQLite(t)}, jc), nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	populate(t, cb.NewConversationServiceClient(conn), "alice")
	bs := cb.NewBackupServiceClient(conn)
	op, err := bs.StartExport(t.Context(), exportJob("alice", "first"))
	if err != nil {
		t.Fatal(err)
	}
	first := waitOp(t, conn, op.GetName())
	// The first export passes the quota as it writes: refused, nothing
	// committed.
	if first.GetError().GetCode() != int32(codes.ResourceExhausted) || !strings.Contains(first.GetError().GetMessage(), "quota") {
		t.Fatalf("an export past the quota: %v, want RESOURCE_EXHAUSTED naming it", first.GetError())
	}
	// Its reason, for programs: in the operation's error and its metadata.
	md := &cb.JobMetadata{}
	if got := reason(status.ErrorProto(first.GetError())); got != "OWNER_QUOTA" || first.GetMetadata().UnmarshalTo(md) != nil || md.GetErrorReason() != got {
		t.Errorf("the failed export's reason: %q, metadata %q; want OWNER_QUOTA in both", got, md.GetErrorReason())
	}
	list, err := bs.ListBackups(t.Context(), &cb.ListBackupsRequest{Owner: "alice"})
	if err != nil || len(list.GetBackups()) != 0 {
		t.Fatalf("the refused export left %d backups (%v)", len(list.GetBackups()), err)
	}
}

// TestE2EOwnerQuotaRefusedAtStart: an owner whose backups already hold
// its quota is refused at StartExport, RESOURCE_EXHAUSTED naming the
// quota, before any job exists; another owner exports.
func TestE2EOwnerQuotaRefusedAtStart(t *testing.T) {
	jc, _ := testJobs(t)
	st := enginetest.SQLite(t)
	addr := serveTCP(t, withJobs(Config{Store: st}, jc), nil)
	conn := dial(t, addr, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	for _, o := range []string{"alice", "bob"} {
		populate(t, cb.NewConversationServiceClient(conn), o)
	}
	bs := cb.NewBackupServiceClient(conn)
	op, err := bs.StartExport(t.Context(), exportJob("alice", "first"))
	if err != nil {
		t.Fatal(err)
	}
	size := exportResult(t, waitOp(t, conn, op.GetName())).GetSummary().GetArchiveBytes()

	// The same store and bucket, served with a quota of what alice holds.
	jc2, _ := testJobs(t)
	jc2.Buckets, jc2.OwnerQuota = jc.Buckets, int64(size)
	addr2 := serveTCP(t, withJobs(Config{Store: st}, jc2), nil)
	conn2 := dial(t, addr2, transport.ClientOptions{Insecure: true, Token: testAdminToken})
	_, err = cb.NewBackupServiceClient(conn2).StartExport(t.Context(), exportJob("alice", "second"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "--owner-backup-quota") {
		t.Fatalf("alice's export at her quota: %v; want RESOURCE_EXHAUSTED naming the quota", err)
	}
	op, err = cb.NewBackupServiceClient(conn2).StartExport(t.Context(), exportJob("bob", "bob's"))
	if err != nil {
		t.Fatalf("bob's export: %v", err)
	}
	if got := waitOp(t, conn2, op.GetName()); got.GetError() != nil {
		t.Errorf("bob's export beside alice's quota: %v", got.GetError())
	}
}
