package interop

import (
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

// TestExportModesRestoreInTheReference: an owner whose store holds records
// from before the write path refused them (put through the store as an
// older server did): a DM whose id panics the reference, a group of a
// 17-byte id with a message, a group with a lone disappearing half, an
// ADDRESS consent record. Lint lists them over gRPC; a default export is
// FAILED_PRECONDITION naming one; EXCLUDE and REPAIR write archives the
// reference imports whole, with their summaries counting what was left
// out and repaired.
func TestExportModesRestoreInTheReference(t *testing.T) {
	st := enginetest.SQLite(t)
	conn := serve(t, server.Config{Store: st})
	arch := cb.NewArchiveServiceClient(conn)
	ctx := t.Context()
	owner := inboxID("legacy owner")

	crashDM := dmWithID("dm:short")
	badID := proto.Clone(sentinelGroup).(*gb.GroupSave)
	badID.Id = id32("seventeen")[:17]
	lone := proto.Clone(sentinelGroup).(*gb.GroupSave)
	lone.Id = id32("lone half")[:16]
	lone.MessageDisappearFromNs = proto.Int64(1_700_000_000_000_000_000)
	for _, g := range []*gb.GroupSave{sentinelGroup, crashDM, badID, lone} {
		if _, err := st.PutGroup(ctx, owner, g); err != nil {
			t.Fatal(err)
		}
	}
	inBad := messageOf("in bad", func(m *mb.GroupMessageSave) { m.GroupId = badID.Id })
	inLone := messageOf("in lone", func(m *mb.GroupMessageSave) { m.GroupId = lone.Id })
	if _, err := st.AppendMessages(ctx, owner, []*mb.GroupMessageSave{sentinelMessage(), inBad, inLone}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 the deprecated value is what an older server stored
	address := &cs.ConsentSave{EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_ADDRESS, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED,
		Entity: "0x0000000000000000000000000000000000000001", ConsentedAtNs: 1}
	if _, err := st.MergeConsent(ctx, owner, []*cs.ConsentSave{address}); err != nil {
		t.Fatal(err)
	}

	// Lint.
	ls, err := arch.Lint(ctx, &cb.LintRequest{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	var findings []*cb.LintFinding
	var summary *cb.LintSummary
	for {
		r, err := ls.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		findings = append(findings, r.GetFindings()...)
		if r.GetSummary() != nil {
			summary = r.GetSummary()
		}
	}
	if summary.GetFindings() != 4 || summary.GetRepairable() != 1 || len(findings) != 4 {
		t.Errorf("lint: %d findings, summary %v; want 4, one repairable", len(findings), summary)
	}

	// The default: refused, naming a record.
	if _, err := exportBytes(arch, owner); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("default export: %v; want FAILED_PRECONDITION", err)
	}

	for _, c := range []struct {
		mode               cb.NonconformingRecords
		excluded, repaired uint64
		loneKept           bool
	}{
		// The DM, the 17-byte group and its message, the lone group and its
		// message, the consent record.
		{cb.NonconformingRecords_NONCONFORMING_RECORDS_EXCLUDE, 6, 0, false},
		{cb.NonconformingRecords_NONCONFORMING_RECORDS_REPAIR, 4, 1, true},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			data, sum, err := exportStream(arch, &cb.ExportRequest{Owner: owner, Key: interopKey, Nonconforming: c.mode})
			if err != nil {
				t.Fatal(err)
			}
			if sum.GetExcludedRecords() != c.excluded || sum.GetRepairedRecords() != c.repaired {
				t.Errorf("summary excluded %d, repaired %d; want %d, %d", sum.GetExcludedRecords(), sum.GetRepairedRecords(), c.excluded, c.repaired)
			}
			imp := []*refImport{{archive: data}}
			importEach(t, imp)
			if imp[0].failed() {
				t.Fatalf("the reference did not import the archive: %s%s", imp[0].err, imp[0].crashed)
			}
			v := &imp[0].view
			if !v.hasMessage(id32("sentinel message")) {
				t.Error("the reference did not import the whole archive")
			}
			if v.hasGroup(lone.Id) != c.loneKept || v.hasMessage(inLone.Id) != c.loneKept {
				t.Errorf("the repaired group in the reference: %v, its message %v; want %v", v.hasGroup(lone.Id), v.hasMessage(inLone.Id), c.loneKept)
			}
		})
	}
}
