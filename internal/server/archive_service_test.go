//lint:file-ignore SA1019 content_type_save is retired but still stored, and made to agree with the envelope on export (ARCH-004, ARCH-008).
package server

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	ds "github.com/contentbackup/contentbackup/api/xmtp/device_sync"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

var archiveKey = bytes.Repeat([]byte{0x42}, 32)

type archiveClients struct {
	conv cb.ConversationServiceClient
	arch cb.ArchiveServiceClient
}

func forEachEngineArchive(t *testing.T, fn func(t *testing.T, c archiveClients, s store.Store)) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Open(t)
			conn := startTCP(t, Config{Store: s})
			fn(t, archiveClients{cb.NewConversationServiceClient(conn), cb.NewArchiveServiceClient(conn)}, s)
		})
	}
}

// exportArchive runs Export and returns the concatenated chunks and the
// summary, checking that the summary describes the bytes.
func exportArchive(t *testing.T, c cb.ArchiveServiceClient, owner string, opts *ds.ArchiveOptions) ([]byte, *cb.ExportSummary) {
	t.Helper()
	stream, err := c.Export(t.Context(), &cb.ExportRequest{Owner: owner, Key: archiveKey, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	var summary *cb.ExportSummary
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Export: %v", err)
		}
		if summary != nil {
			t.Fatal("a message after the summary")
		}
		data = append(data, m.GetChunk()...)
		summary = m.GetSummary()
	}
	if summary == nil {
		t.Fatal("the export stream ended without a summary")
	}
	sum := sha256.Sum256(data)
	if summary.GetArchiveBytes() != uint64(len(data)) || !bytes.Equal(summary.GetSha256(), sum[:]) {
		t.Errorf("summary %d bytes %x; the chunks are %d bytes %x", summary.GetArchiveBytes(), summary.GetSha256(), len(data), sum)
	}
	return data, summary
}

func importArchive(t *testing.T, c cb.ArchiveServiceClient, owner string, key, data []byte, chunk int) (*cb.ImportResponse, error) {
	t.Helper()
	stream, err := c.Import(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: owner, Key: key}}}); err != nil {
		// io.EOF: the server ended the stream first (a refusal before any
		// message); CloseAndRecv has its status.
		return stream.CloseAndRecv()
	}
	for len(data) > 0 {
		n := min(chunk, len(data))
		if err := stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: data[:n]}}); err != nil {
			break // the server answered early; CloseAndRecv has why
		}
		data = data[n:]
	}
	return stream.CloseAndRecv()
}

// populate gives owner a group, a DM, messages of every kind of content
// and consent, through the ConversationService.
func populate(t *testing.T, c cb.ConversationServiceClient, owner string) {
	t.Helper()
	g := storetest.FullGroup("group-1")
	dm := storetest.FullGroup("dm-1")
	dm.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM
	put(t, c, owner, g)
	put(t, c, owner, dm)
	custom := envelope(t, &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 1}, Content: []byte("?")})
	var msgs []*mb.GroupMessageSave
	for i, content := range [][]byte{textEnvelope(t, "hello"), custom, []byte("not an envelope")} {
		m := storetest.FullMessage(fmt.Sprintf("m%d", i), g.Id, int64(i+1))
		m.DecryptedMessageBytes, m.ExpiresAtNs = content, nil
		msgs = append(msgs, m)
	}
	dmMsg := storetest.FullMessage("dm-m", dm.Id, 1)
	dmMsg.DecryptedMessageBytes, dmMsg.ExpiresAtNs = textEnvelope(t, "hi"), nil
	appendMsgs(t, c, owner, append(msgs, dmMsg)...)
	if _, err := c.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{
		storetest.Consent("inbox-x", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 5),
	}}); err != nil {
		t.Fatal(err)
	}
}

// everything lists an owner's groups, messages and consent over gRPC.
func everything(t *testing.T, c cb.ConversationServiceClient, owner string) (groups []*gb.GroupSave, msgs []*mb.GroupMessageSave, consent []*cs.ConsentSave) {
	t.Helper()
	gs, err := c.ListGroups(t.Context(), &cb.ListGroupsRequest{Owner: owner, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs.GetGroups() {
		groups = append(groups, g)
		for _, m := range listAll(t, c, owner, g.Id) {
			msgs = append(msgs, m.GetMessage())
		}
	}
	cons, err := c.ListConsent(t.Context(), &cb.ListConsentRequest{Owner: owner, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return groups, msgs, cons.GetRecords()
}

func TestE2EArchiveExportImport(t *testing.T) {
	forEachEngineArchive(t, func(t *testing.T, c archiveClients, _ store.Store) {
		a, b := storetest.Owner("a"), storetest.Owner("b")
		populate(t, c.conv, a)
		data, summary := exportArchive(t, c.arch, a, nil)
		if summary.GetGroups() != 2 || summary.GetMessages() != 4 || summary.GetConsentRecords() != 1 {
			t.Errorf("summary %v", summary)
		}

		meta, err := readMetadata(t, c.arch, archiveKey, data)
		if err != nil || meta.GetVersion() != 0 || meta.GetMetadata().GetExportedAtNs() != summary.GetExportedAtNs() || meta.GetRecord0Nonce() != cb.NonceForm_NONCE_FORM_COUNTER {
			t.Errorf("ReadMetadata: %v, %v", meta, err)
		}

		// Odd chunk sizes: record boundaries never line up with chunks.
		res, err := importArchive(t, c.arch, b, archiveKey, data, 7)
		if err != nil {
			t.Fatal(err)
		}
		if res.GetGroups().GetInserted() != 2 || res.GetMessages().GetInserted() != 4 || res.GetConsent().GetInserted() != 1 || res.GetRecords() != 8 {
			t.Errorf("import %v", res)
		}
		ga, ma, ca := everything(t, c.conv, a)
		gb2, mb2, cb2 := everything(t, c.conv, b)
		var wantGroups []*gb.GroupSave
		for _, g := range ga {
			wantGroups = append(wantGroups, storetest.RestoredForm(g))
		}
		diff(t, "groups: Restored, historical metadata exact (ARCH-020)", gb2, wantGroups)
		// The retired content_type_save goes out only where it names the
		// message's type, the envelope's or, for untyped content, the
		// stored one (the fixtures' TEXT fits xmtp.org/text alone): the
		// reference's import would read it before the type string.
		var wantMsgs []*mb.GroupMessageSave
		for _, m := range ma {
			m = proto.Clone(m).(*mb.GroupMessageSave)
			if m.GetAuthorityId() != "xmtp.org" || m.GetContentType() != "text" {
				m.ContentTypeSave = mb.ContentTypeSave_CONTENT_TYPE_SAVE_UNSPECIFIED
			}
			wantMsgs = append(wantMsgs, m)
		}
		diff(t, "messages: ids and bytes exact, unknown types included (ARCH-008)", mb2, wantMsgs)
		diff(t, "consent", cb2, ca)

		// ARCH-016: again, nothing changes.
		res, err = importArchive(t, c.arch, b, archiveKey, data, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if res.GetGroups().GetInserted()+res.GetGroups().GetUpdated()+res.GetMessages().GetInserted()+res.GetConsent().GetInserted()+res.GetConsent().GetUpdated() != 0 {
			t.Errorf("second import changed records: %v", res)
		}
		g3, m3, c3 := everything(t, c.conv, b)
		diff(t, "groups after re-import", g3, gb2)
		diff(t, "messages after re-import", m3, mb2)
		diff(t, "consent after re-import", c3, cb2)

		// ARCH-015/-026: B's restored groups refuse appends and stay out of
		// B's export until activated.
		_, err = c.conv.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: b, Messages: []*mb.GroupMessageSave{storetest.Message("new", storetest.GroupID("group-1"), 9)}})
		wantCode(t, err, codes.FailedPrecondition, "inactive")
		_, sum := exportArchive(t, c.arch, b, nil)
		if sum.GetGroups() != 0 || sum.GetMessages() != 0 {
			t.Errorf("restored groups exported: %v", sum)
		}
		if _, err := c.conv.ActivateGroup(t.Context(), &cb.ActivateGroupRequest{Owner: b, GroupId: storetest.GroupID("group-1")}); err != nil {
			t.Fatal(err)
		}
		appendMsgs(t, c.conv, b, storetest.Message("new", storetest.GroupID("group-1"), 9))
		if _, sum = exportArchive(t, c.arch, b, nil); sum.GetGroups() != 1 || sum.GetMessages() != 4 {
			t.Errorf("after activation: %v", sum)
		}
	})
}

func TestE2EArchiveImportIntoLiveStore_ARCH014(t *testing.T) {
	forEachEngineArchive(t, func(t *testing.T, c archiveClients, _ store.Store) {
		a, b := storetest.Owner("a"), storetest.Owner("b")
		populate(t, c.conv, a)
		data, _ := exportArchive(t, c.arch, a, nil)
		live := storetest.MinimalGroup("group-1")
		live.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_PENDING
		put(t, c.conv, b, live)
		if _, err := importArchive(t, c.arch, b, archiveKey, data, 4096); err != nil {
			t.Fatal(err)
		}
		got, err := c.conv.GetGroup(t.Context(), &cb.GetGroupRequest{Owner: b, GroupId: live.Id})
		if err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(live).(*gb.GroupSave)
		want.LastMessageNs = storetest.FullGroup("x").LastMessageNs
		diff(t, "live group after import", got.GetGroup(), want)
	})
}

func TestE2EArchiveReadMetadataAndFailedImportRetry_ARCH011_ARCH021(t *testing.T) {
	forEachEngineArchive(t, func(t *testing.T, c archiveClients, _ store.Store) {
		a, b := storetest.Owner("a"), storetest.Owner("b")
		put(t, c.conv, a, storetest.MinimalGroup("g"))
		for i := range 3 {
			msgs := storetest.Messages(fmt.Sprintf("b%d", i), storetest.GroupID("g"), 1000, int64(i*1000))
			appendMsgs(t, c.conv, a, msgs...)
		}
		data, _ := exportArchive(t, c.arch, a, nil)
		// ARCH-011: record 0 is all ReadMetadata needs; the first half of
		// a multi-block archive is enough, and nothing is applied.
		if meta, err := readMetadata(t, c.arch, archiveKey, data[:len(data)/2]); err != nil || meta.GetMetadata() == nil {
			t.Errorf("ReadMetadata from half an archive: %v, %v", meta, err)
		}
		_, err := importArchive(t, c.arch, b, archiveKey, data[:len(data)*2/3], 1000)
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "record ") {
			t.Fatalf("truncated import: %v; want INVALID_ARGUMENT naming a record", err)
		}
		var record string
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				record = info.GetMetadata()["record"]
			}
		}
		if record == "" {
			t.Error("no record number in the ErrorInfo")
		}
		_, applied, _ := everything(t, c.conv, b)
		if len(applied) == 0 || len(applied) >= 3000 || fmt.Sprint(len(applied)+2) != record {
			t.Errorf("%d messages applied before the failure at record %s; want every one before it", len(applied), record)
		}
		res, err := importArchive(t, c.arch, b, archiveKey, data, 1<<16)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if res.GetMessages().GetInserted()+res.GetMessages().GetUnchanged() != 3000 || res.GetMessages().GetUnchanged() != uint64(len(applied)) {
			t.Errorf("retry %v", res.GetMessages())
		}
	})
}

func readMetadata(t *testing.T, c cb.ArchiveServiceClient, key, data []byte) (*cb.ReadMetadataResponse, error) {
	stream, err := c.ReadMetadata(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&cb.ReadMetadataRequest{Payload: &cb.ReadMetadataRequest_Key{Key: key}}); err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 {
		n := min(len(data), 64)
		if stream.Send(&cb.ReadMetadataRequest{Payload: &cb.ReadMetadataRequest_Chunk{Chunk: data[:n]}}) != nil {
			break
		}
		data = data[n:]
	}
	return stream.CloseAndRecv()
}

func verify(t *testing.T, c cb.ArchiveServiceClient, key, data []byte) (*cb.VerifyResponse, error) {
	stream, err := c.Verify(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&cb.VerifyRequest{Payload: &cb.VerifyRequest_Key{Key: key}}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&cb.VerifyRequest{Payload: &cb.VerifyRequest_Chunk{Chunk: data}}); err != nil {
		t.Fatal(err)
	}
	return stream.CloseAndRecv()
}

func TestE2EArchiveVerifyAndBadInput(t *testing.T) {
	forEachEngineArchive(t, func(t *testing.T, c archiveClients, _ store.Store) {
		a := storetest.Owner("a")
		populate(t, c.conv, a)
		data, sum := exportArchive(t, c.arch, a, nil)
		rep, err := verify(t, c.arch, archiveKey, data)
		if err != nil || rep.GetProblem() != nil || rep.GetGroups() != sum.GetGroups() || rep.GetMessages() != sum.GetMessages() || rep.GetConsentRecords() != 1 {
			t.Errorf("verify: %v, %v", rep, err)
		}
		corrupt := bytes.Clone(data)
		corrupt[len(corrupt)-20] ^= 0xff
		rep, err = verify(t, c.arch, archiveKey, corrupt)
		if err != nil || rep.GetProblem() == nil {
			t.Errorf("verify of a corrupt archive: %v, %v; want a problem", rep, err)
		}
		wrongKey := bytes.Repeat([]byte{1}, 32)
		rep, _ = verify(t, c.arch, wrongKey, data)
		if rep.GetProblem() == nil || rep.GetProblem().Record == nil || rep.GetProblem().GetRecord() != 0 {
			t.Errorf("verify under the wrong key: %v; want a problem at record 0", rep)
		}

		before := func() string {
			g, m, cons := everything(t, c.conv, a)
			return fmt.Sprint(len(g), len(m), len(cons))
		}()
		stream, err := c.arch.Export(t.Context(), &cb.ExportRequest{Owner: a, Key: archiveKey[:31]})
		if err == nil {
			_, err = stream.Recv()
		}
		wantCode(t, err, codes.InvalidArgument, "key: 31 bytes")
		stream, _ = c.arch.Export(t.Context(), &cb.ExportRequest{Owner: a, Key: archiveKey, Options: &ds.ArchiveOptions{StartNs: proto.Int64(2), EndNs: proto.Int64(1)}})
		_, err = stream.Recv()
		wantCode(t, err, codes.InvalidArgument, "options.start_ns")
		stream, _ = c.arch.Export(t.Context(), &cb.ExportRequest{Key: archiveKey})
		_, err = stream.Recv()
		wantCode(t, err, codes.InvalidArgument, "owner: required")
		stream, _ = c.arch.Export(t.Context(), &cb.ExportRequest{Owner: a, Key: archiveKey, Nonconforming: 9})
		_, err = stream.Recv()
		wantCode(t, err, codes.InvalidArgument, "nonconforming: 9 is not")

		_, err = importArchive(t, c.arch, a, archiveKey[:16], data, 1024)
		wantCode(t, err, codes.InvalidArgument, "start.key: 16 bytes")
		_, err = importArchive(t, c.arch, a, wrongKey, data, 1024)
		wantCode(t, err, codes.InvalidArgument, "fails authentication")
		wantCode(t, err, codes.InvalidArgument, "record 0")
		later := bytes.Clone(data)
		later[0] = 1
		_, err = importArchive(t, c.arch, a, archiveKey, later, 1024)
		wantCode(t, err, codes.InvalidArgument, "container version 1")
		_, err = readMetadata(t, c.arch, archiveKey, later)
		wantCode(t, err, codes.InvalidArgument, "container version 1")
		_, err = readMetadata(t, c.arch, archiveKey, nil)
		wantCode(t, err, codes.InvalidArgument, "truncated")

		ist, _ := c.arch.Import(t.Context())
		_ = ist.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: data}})
		_, err = ist.CloseAndRecv()
		wantCode(t, err, codes.InvalidArgument, "start: the first message")

		after := func() string {
			g, m, cons := everything(t, c.conv, a)
			return fmt.Sprint(len(g), len(m), len(cons))
		}()
		if before != after {
			t.Errorf("bad input changed the store: %s then %s", before, after)
		}
	})
}

// TestE2EArchiveEstimateExport: an estimate reports what the export
// itself then reports, counts and exact length, on both engines, writing
// nothing; a window narrows both alike; a bad rule is INVALID_ARGUMENT.
func TestE2EArchiveEstimateExport(t *testing.T) {
	forEachEngineArchive(t, func(t *testing.T, c archiveClients, s store.Store) {
		populate(t, c.conv, "alice")
		for _, opts := range []*ds.ArchiveOptions{nil, {StartNs: proto.Int64(1)}} {
			est, err := c.arch.EstimateExport(t.Context(), &cb.EstimateExportRequest{Owner: "alice", Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			data, sum := exportArchive(t, c.arch, "alice", opts)
			e := est.GetSummary()
			if e.GetGroups() != sum.GetGroups() || e.GetMessages() != sum.GetMessages() || e.GetConsentRecords() != sum.GetConsentRecords() ||
				e.GetArchiveBytes() != uint64(len(data)) || len(e.GetSha256()) != 0 {
				t.Errorf("options %v: estimate %v; the export was %d bytes, %v", opts, e, len(data), sum)
			}
		}
		_, err := c.arch.EstimateExport(t.Context(), &cb.EstimateExportRequest{Owner: "alice", Nonconforming: 9})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("an undefined rule: %v, want INVALID_ARGUMENT", err)
		}
		_, err = c.arch.EstimateExport(t.Context(), &cb.EstimateExportRequest{Owner: ""})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("no owner: %v, want INVALID_ARGUMENT", err)
		}
	})
}
