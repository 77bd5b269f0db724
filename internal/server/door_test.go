package server

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestE2EDoorRefusesWhatTheReferenceRefuses: the reference's importer
// (libxmtp 1.11, probed record by record) stops a whole import at a
// message of unspecified kind or delivery status and at a group of
// unspecified conversation type. None comes in by AppendMessages, PutGroup
// or Import; Verify names such a record; and a stored one (written before
// this rule) fails an export rather than being written or dropped.
func TestE2E_ARCH017_DoorRefusesWhatTheReferenceRefuses(t *testing.T) {
	forEachEngineArchive(t, func(t *testing.T, c archiveClients, s store.Store) {
		ctx := t.Context()
		g := storetest.FullGroup("g")
		put(t, c.conv, "door", g)
		for field, mutate := range map[string]func(*mb.GroupMessageSave){
			"messages[0].kind: required":            func(m *mb.GroupMessageSave) { m.Kind = 0 },
			"messages[0].delivery_status: required": func(m *mb.GroupMessageSave) { m.DeliveryStatus = 0 },
		} {
			m := storetest.Message("m", g.Id, 1)
			mutate(m)
			_, err := c.conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: "door", Messages: []*mb.GroupMessageSave{m}})
			wantCode(t, err, codes.InvalidArgument, field)
		}
		bad := storetest.FullGroup("bad")
		bad.ConversationType = 0
		_, err := c.conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: "door", Group: bad})
		wantCode(t, err, codes.InvalidArgument, "group.conversation_type: required")

		// An archive holding a message of unspecified delivery status.
		var buf bytes.Buffer
		w, err := archive.NewWriter(&buf, archiveKey)
		if err != nil {
			t.Fatal(err)
		}
		m := storetest.Message("undelivered", g.Id, 1)
		m.DeliveryStatus = 0
		for _, el := range []*ds.BackupElement{
			{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{ExportedAtNs: 1}}},
			{Element: &ds.BackupElement_Group{Group: g}},
			{Element: &ds.BackupElement_GroupMessage{GroupMessage: m}},
		} {
			if err := w.WriteElement(el); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = importArchive(t, c.arch, "door-import", archiveKey, buf.Bytes(), 4096)
		wantCode(t, err, codes.InvalidArgument, "delivery_status: required")
		if !strings.Contains(status.Convert(err).Message(), "record 2") {
			t.Errorf("the import refusal does not name record 2: %v", err)
		}
		rep, err := verify(t, c.arch, archiveKey, buf.Bytes())
		if err != nil || rep.GetProblem().GetRecord() != 2 || !strings.Contains(rep.GetProblem().GetReason(), "delivery_status") {
			t.Errorf("Verify: %v %v; want the problem at record 2", rep.GetProblem(), err)
		}

		// Consent dated far ahead would pin its state: Import refuses it as
		// SetConsent does.
		buf.Reset()
		w, err = archive.NewWriter(&buf, archiveKey)
		if err != nil {
			t.Fatal(err)
		}
		pinned := storetest.Consent("x", 2, time.Now().Add(48*time.Hour).UnixNano())
		for _, el := range []*ds.BackupElement{
			{Element: &ds.BackupElement_Metadata{Metadata: &ds.BackupMetadataSave{ExportedAtNs: 1}}},
			{Element: &ds.BackupElement_Consent{Consent: pinned}},
		} {
			if err := w.WriteElement(el); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = importArchive(t, c.arch, "door-import", archiveKey, buf.Bytes(), 4096)
		wantCode(t, err, codes.InvalidArgument, "consent.consented_at_ns")

		// A message stored before the rule, straight into the store.
		legacy := storetest.Message("legacy", g.Id, 2)
		legacy.DeliveryStatus = 0
		if _, err := s.AppendMessages(ctx, "door", []*mb.GroupMessageSave{legacy}, store.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		stream, err := c.arch.Export(ctx, &cb.ExportRequest{Owner: "door", Key: archiveKey})
		if err == nil {
			for err == nil {
				var resp *cb.ExportResponse
				resp, err = stream.Recv()
				if resp.GetSummary() != nil {
					t.Fatal("an export with an unexportable message completed")
				}
			}
		}
		wantCode(t, err, codes.FailedPrecondition, "message 6c6567616379 cannot be exported")
	})
}

// TestE2EVerifyReportsTheVersionRead: Verify of an archive whose header
// says version 1 reports version 1 (and the problem), not 0.
func TestE2E_ARCH003_VerifyReportsTheVersionRead(t *testing.T) {
	c := cb.NewArchiveServiceClient(startTCP(t, Config{Store: enginetest.SQLite(t)}))
	header := make([]byte, archive.HeaderSize+8)
	header[0] = 1 // little-endian version 1
	rep, err := verify(t, c, archiveKey, header)
	if err != nil || rep.GetVersion() != 1 || !strings.Contains(rep.GetProblem().GetReason(), "version 1") {
		t.Errorf("Verify of a version-1 header: version %d, problem %v, %v", rep.GetVersion(), rep.GetProblem(), err)
	}
}
