package interop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/contentapi"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
)

// These tests prove the archive against the reference client itself:
// archive.mjs runs libxmtp's createArchive, archiveMetadata and
// importArchive in an offline client (REFERENCE.md).

var interopKey = bytes.Repeat([]byte{0x5a}, 32)

// The JS enums of @xmtp/wasm-bindings 1.11.0.
const (
	jsConsentGroupID, jsConsentInboxID = 0, 1
	jsConsentAllowed, jsConsentDenied  = 1, 2
	jsMembershipRestored               = 3
)

type services struct {
	conv cb.ConversationServiceClient
	arch cb.ArchiveServiceClient
}

// startServices serves the whole API on the embedded store over TCP.
func startServices(t *testing.T) services {
	t.Helper()
	conn := serve(t, server.Config{Store: enginetest.SQLite(t)})
	return services{cb.NewConversationServiceClient(conn), cb.NewArchiveServiceClient(conn)}
}

// id32 is a 32-byte id derived from a name, as message ids are hashes.
func id32(name string) []byte { s := sha256.Sum256([]byte(name)); return s[:] }

func inboxID(name string) string { return hex.EncodeToString(id32("inbox " + name)) }

// refDisappearing is a conversation's disappearing setting in the
// reference, as decimal strings.
type refDisappearing struct {
	FromNs string `json:"fromNs"`
	InNs   string `json:"inNs"`
}

type refArchiveView struct {
	// InboxID is the importing client's inbox id.
	InboxID  string `json:"inboxId"`
	Metadata struct {
		BackupVersion int     `json:"backupVersion"`
		Elements      []int   `json:"elements"`
		ExportedAtNs  string  `json:"exportedAtNs"`
		StartNs       *string `json:"startNs"`
		EndNs         *string `json:"endNs"`
	} `json:"metadata"`
	Conversations []struct {
		ID              string           `json:"id"`
		MembershipState int              `json:"membershipState"`
		Name            *string          `json:"name"`
		Disappearing    *refDisappearing `json:"disappearing"`
	} `json:"conversations"`
	Messages []struct {
		ID          string          `json:"id"`
		ConvoID     string          `json:"convoId"`
		Kind        json.RawMessage `json:"kind"`
		SentAtNs    json.RawMessage `json:"sentAtNs"`
		Envelope    refEnvelope     `json:"envelope"`
		DecodedType *string         `json:"decodedType"`
		// ContentType is the type the reference's database lists the
		// message under (its enriched listing's contentType).
		ContentType json.RawMessage `json:"contentType"`
		// ListedAs names the ContentType filters that find the message.
		ListedAs []string `json:"listedAs"`
	} `json:"messages"`
	Consent []struct {
		EntityType int    `json:"entityType"`
		Entity     string `json:"entity"`
		State      int    `json:"state"`
	} `json:"consent"`
}

// The reference's name for the decoded content of each catalogue type our
// interop values cover (DecodedMessageContent.type).
var referenceDecodedType = map[string]string{
	"text": "text", "markdown": "markdown", "attachment": "attachment", "attachment_unnamed": "attachment",
	"remote_attachment": "remoteAttachment", "multi_remote_attachment": "multiRemoteAttachment",
	"transaction_reference": "transactionReference", "transaction_reference_min": "transactionReference",
	"wallet_send_calls": "walletSendCalls", "actions": "actions", "intent": "intent",
	"reply": "reply", "leave_request": "leaveRequest",
	// Reactions attach to their target, and read receipts and deletions are
	// not listed: the reference's enriched listing shows none on its own.
	"reaction_added": "", "reaction_removed": "", "read_receipt": "", "delete_message": "",
}

func TestReferenceImportsOurArchive(t *testing.T) {
	svc := startServices(t)
	ctx := t.Context()
	owner := inboxID("owner")
	reg := codec.NewRegistry()

	group := &gb.GroupSave{
		Id: id32("group")[:16], CreatedAtNs: 1_700_000_000_000_000_000, MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP, AddedByInboxId: owner,
		Metadata:        &gb.ImmutableMetadataSave{CreatorInboxId: owner},
		MutableMetadata: &gb.MutableMetadataSave{Attributes: map[string]string{"group_name": "Ours"}, SuperAdminList: []string{owner}},
		LastMessageNs:   proto.Int64(1_700_000_000_000_000_100),
	}
	peer := inboxID("peer")
	dm := &gb.GroupSave{
		Id: id32("dm")[:16], CreatedAtNs: 1_700_000_000_000_000_001, MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM, AddedByInboxId: peer, DmId: proto.String("dm:" + owner + ":" + peer),
		Metadata: &gb.ImmutableMetadataSave{CreatorInboxId: peer},
	}
	for _, g := range []*gb.GroupSave{group, dm} {
		if _, err := svc.conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
			t.Fatal(err)
		}
	}

	type sent struct {
		name     string
		envelope []byte
	}
	var msgs []*mb.GroupMessageSave
	byID := map[string]sent{}
	add := func(name string, g *gb.GroupSave, env []byte) {
		m := &mb.GroupMessageSave{
			Id: id32("message " + name), GroupId: g.Id, DecryptedMessageBytes: env, SentAtNs: 1_700_000_000_000_000_010 + int64(len(msgs)),
			Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION, SenderInstallationId: id32("installation"), SenderInboxId: owner,
			DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED, ExpiryKnown: proto.Bool(true),
		}
		msgs = append(msgs, m)
		byID[hex.EncodeToString(m.Id)] = sent{name, env}
	}
	for name, content := range interopValues() {
		ec, err := contentapi.Encode(reg, content)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := proto.Marshal(ec)
		add(name, group, b)
	}
	// The catalogue types the standalone encoders of reference.mjs do not
	// cover: a reply (nested text), a leave request and a deletion naming
	// no stored message.
	for name, content := range map[string]*cb.Content{
		"reply": {Value: &cb.Content_Reply{Reply: &cb.Reply{Reference: hex.EncodeToString(id32("message text")),
			Nested: &cb.Reply_Content{Content: &cb.Content{Value: &cb.Content_Text{Text: "a reply"}}}}}},
		"leave_request":  {Value: &cb.Content_LeaveRequest{LeaveRequest: &ct.LeaveRequest{}}},
		"delete_message": {Value: &cb.Content_DeleteMessage{DeleteMessage: &ct.DeleteMessage{MessageId: hex.EncodeToString(id32("nothing"))}}},
		// 300 KiB: the archive's zstd frame holds several raw blocks, and
		// this record crosses from one to the next.
		"large_text": {Value: &cb.Content_Text{Text: strings.Repeat("long text ", 30<<10)}},
	} {
		ec, err := contentapi.Encode(reg, content)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := proto.Marshal(ec)
		add(name, group, b)
	}
	custom, _ := proto.Marshal(&mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 2}, Content: []byte{1, 2, 3}, Fallback: proto.String("A poll")})
	add("custom", group, custom)
	dmEnvelope, err := reg.Encode(codec.TypeText, "in the DM")
	if err != nil {
		t.Fatal(err)
	}
	dmText, _ := proto.Marshal(dmEnvelope)
	add("dm_text", dm, dmText)
	if _, err := svc.conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	blocked := inboxID("blocked")
	if _, err := svc.conv.SetConsent(ctx, &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{
		{EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, Entity: blocked, ConsentedAtNs: 5},
		{EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, Entity: hex.EncodeToString(group.Id), ConsentedAtNs: 5},
	}}); err != nil {
		t.Fatal(err)
	}

	data, summary := exportOver(t, svc.arch, owner)
	if len(data) < 4*32<<10 {
		t.Fatalf("the archive is %d bytes: too small to span several zstd blocks", len(data))
	}

	var view refArchiveView
	runScript(t, "archive.mjs", "import", map[string]any{
		"key": hex.EncodeToString(interopKey), "archive": hex.EncodeToString(data),
		"consent": []map[string]any{{"entityType": jsConsentInboxID, "entity": blocked}, {"entityType": jsConsentGroupID, "entity": hex.EncodeToString(group.Id)}},
	}, &view)

	// archiveMetadata (ARCH-011) reads what we wrote.
	if view.Metadata.BackupVersion != 0 || view.Metadata.ExportedAtNs != fmt.Sprint(summary.GetExportedAtNs()) ||
		fmt.Sprint(view.Metadata.Elements) != "[0 1]" || view.Metadata.StartNs != nil || view.Metadata.EndNs != nil {
		t.Errorf("the reference's archiveMetadata: %+v; our summary %v", view.Metadata, summary)
	}
	// importArchive restored both conversations, Restored.
	convs := map[string]int{}
	for _, c := range view.Conversations {
		convs[c.ID] = c.MembershipState
	}
	for _, g := range []*gb.GroupSave{group, dm} {
		if st, ok := convs[hex.EncodeToString(g.Id)]; !ok || st != jsMembershipRestored {
			t.Errorf("conversation %x: in the reference %v, state %d; want restored", g.Id, ok, st)
		}
	}
	// Every message, its id and content as we sent it, decoding there as
	// it does here.
	seen := map[string]bool{}
	for _, m := range view.Messages {
		s, ok := byID[m.ID]
		if !ok {
			continue
		}
		seen[m.ID] = true
		ours := &mc.EncodedContent{}
		if err := proto.Unmarshal(s.envelope, ours); err != nil {
			t.Fatal(err)
		}
		if theirs := m.Envelope.proto(t); !proto.Equal(normalize(ours), normalize(theirs)) {
			t.Errorf("%s: the reference reads %v; we sent %v", s.name, theirs, ours)
		}
		ourDecode, _ := contentapi.DecodeResponse(reg, s.envelope, contentapi.Options{})
		got := ""
		if m.DecodedType != nil {
			got = *m.DecodedType
		}
		switch want, catalogue := referenceDecodedType[s.name]; {
		case s.name == "custom":
			if got != "custom" || ourDecode.GetUndecoded().GetKind() != cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC {
				t.Errorf("custom: the reference decodes %q, we %v; want both to keep it as an unknown type", got, ourDecode)
			}
		case s.name == "dm_text":
			if got != "text" {
				t.Errorf("dm_text: the reference decodes %q", got)
			}
		case catalogue && got != want:
			t.Errorf("%s: the reference decodes it as %q; want %q", s.name, got, want)
		case catalogue && ourDecode.GetContent() == nil:
			t.Errorf("%s: we do not decode it: %v", s.name, ourDecode)
		}
	}
	for id, s := range byID {
		if !seen[id] {
			t.Errorf("%s (%s…): not in the reference after import", s.name, id[:8])
		}
	}
	if len(view.Consent) != 2 {
		t.Fatalf("the reference answered %d consent queries of 2", len(view.Consent))
	}
	for _, c := range view.Consent {
		want := map[string]int{blocked: jsConsentDenied, hex.EncodeToString(group.Id): jsConsentAllowed}[c.Entity]
		if c.State != want {
			t.Errorf("consent for %s…: the reference has %d; the archive says %d", c.Entity[:8], c.State, want)
		}
	}
}

// normalize makes an envelope comparable as a value: an empty parameter
// map and a missing one are the same on the wire.
func normalize(ec *mc.EncodedContent) *mc.EncodedContent {
	c := proto.Clone(ec).(*mc.EncodedContent)
	if len(c.Parameters) == 0 {
		c.Parameters = nil
	}
	return c
}

func exportOver(t *testing.T, c cb.ArchiveServiceClient, owner string) ([]byte, *cb.ExportSummary) {
	t.Helper()
	data, summary, err := exportStream(c, &cb.ExportRequest{Owner: owner, Key: interopKey})
	if err != nil {
		t.Fatal(err)
	}
	return data, summary
}

// exportStream runs an Export and returns the archive and its summary; a
// stream that ends without the summary is an error.
func exportStream(c cb.ArchiveServiceClient, req *cb.ExportRequest) ([]byte, *cb.ExportSummary, error) {
	stream, err := c.Export(context.Background(), req)
	if err != nil {
		return nil, nil, err
	}
	var data []byte
	var summary *cb.ExportSummary
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		data = append(data, m.GetChunk()...)
		if m.GetSummary() != nil {
			summary = m.GetSummary()
		}
	}
	if summary == nil {
		return nil, nil, errors.New("the export ended without a summary")
	}
	return data, summary, nil
}

type refCreated struct {
	Archive  string   `json:"archive"`
	Groups   []string `json:"groups"`
	Messages []struct {
		Name     string      `json:"name"`
		ID       string      `json:"id"`
		Group    string      `json:"group"`
		Envelope refEnvelope `json:"envelope"`
	} `json:"messages"`
	Consent []struct {
		EntityType int    `json:"entityType"`
		State      int    `json:"state"`
		Entity     string `json:"entity"`
	} `json:"consent"`
}

// Our names for the content the reference writes in archive.mjs create.
var ourContentType = map[string]string{
	"text": "xmtp.org/text:1.0", "markdown": "xmtp.org/markdown:1.0", "reaction": "xmtp.org/reaction:2.0",
	"readReceipt": "xmtp.org/readReceipt:1.0", "attachment": "xmtp.org/attachment:1.0",
	"remoteAttachment": "xmtp.org/remoteStaticAttachment:1.0", "multiRemoteAttachment": "xmtp.org/multiRemoteStaticAttachment:1.0",
	"transactionReference": "xmtp.org/transactionReference:1.0", "intent": "coinbase.com/intent:1.0",
}

func TestWeImportReferenceArchive(t *testing.T) {
	svc := startServices(t)
	ctx := t.Context()
	var created refCreated
	runScript(t, "archive.mjs", "create", map[string]any{
		"key": hex.EncodeToString(interopKey),
		"custom": []map[string]any{{
			"type":       map[string]any{"authorityId": "example.com", "typeId": "poll", "versionMajor": 1, "versionMinor": 0},
			"parameters": map[string]string{"question": "lunch?"}, "fallback": "A poll", "content": "0a0b0c",
		}},
	}, &created)
	data, err := hex.DecodeString(created.Archive)
	if err != nil {
		t.Fatal(err)
	}

	// The bytes of each message as the reference wrote them, read with our
	// container alone: what our import must keep exactly.
	inArchive := map[string][]byte{}
	r, err := archive.NewReader(bytes.NewReader(data), interopKey, archive.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Metadata(); err != nil {
		t.Fatalf("the reference's record 0: %v", err)
	}
	for {
		el, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the reference's archive: %v", err)
		}
		if m := el.GetGroupMessage(); m != nil {
			inArchive[hex.EncodeToString(m.Id)] = m.DecryptedMessageBytes
		}
	}

	owner := inboxID("importer")
	res, err := importOver(t, svc.arch, owner, data)
	if err != nil {
		t.Fatalf("import of the reference's archive: %v", err)
	}
	if res.GetGroups().GetInserted() != uint64(len(created.Groups)) || res.GetMessages().GetInserted() != uint64(len(inArchive)) {
		t.Errorf("import %v; the reference wrote %d groups and %d messages", res, len(created.Groups), len(inArchive))
	}

	stored := map[string]*cb.StoredMessage{}
	for _, gid := range created.Groups {
		id, _ := hex.DecodeString(gid)
		g, err := svc.conv.GetGroup(ctx, &cb.GetGroupRequest{Owner: owner, GroupId: id})
		if err != nil || g.GetGroup().GetMembershipState() != gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED {
			t.Errorf("group %s: %v, %v; want it Restored", gid, g, err)
			continue
		}
		page, err := svc.conv.ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: id, PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.GetMessages() {
			stored[hex.EncodeToString(m.GetMessage().GetId())] = m
		}
	}
	for _, m := range created.Messages {
		s, ok := stored[m.ID]
		if !ok {
			t.Errorf("%s (%s…): not stored after import", m.Name, m.ID[:8])
			continue
		}
		if !bytes.Equal(s.GetMessage().GetDecryptedMessageBytes(), inArchive[m.ID]) {
			t.Errorf("%s: the content bytes changed on import", m.Name)
		}
		ours := &mc.EncodedContent{}
		if err := proto.Unmarshal(s.GetMessage().GetDecryptedMessageBytes(), ours); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if !proto.Equal(normalize(ours), normalize(m.Envelope.proto(t))) {
			t.Errorf("%s: stored %v; the reference sent %v", m.Name, ours, m.Envelope.proto(t))
		}
		if hex.EncodeToString(s.GetMessage().GetGroupId()) != m.Group {
			t.Errorf("%s: in group %x; the reference sent it to %s", m.Name, s.GetMessage().GetGroupId(), m.Group)
		}
		switch {
		case strings.HasPrefix(m.Name, "custom"):
			if s.GetDecoded().GetUndecoded().GetKind() != cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC || s.GetDecoded().GetContentType() != "example.com/poll:1.0" {
				t.Errorf("%s decodes as %v", m.Name, s.GetDecoded())
			}
		case s.GetDecoded().GetContent() == nil || s.GetDecoded().GetContentType() != ourContentType[m.Name]:
			t.Errorf("%s decodes as %v; want %s", m.Name, s.GetDecoded(), ourContentType[m.Name])
		}
	}

	cons, err := svc.conv.ListConsent(ctx, &cb.ListConsentRequest{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]cs.ConsentStateSave{}
	for _, c := range cons.GetRecords() {
		got[c.GetEntity()] = c.GetState()
	}
	if len(created.Consent) == 0 || len(created.Messages) < 10 {
		t.Fatalf("the reference wrote %d messages and %d consent records", len(created.Messages), len(created.Consent))
	}
	for _, c := range created.Consent {
		want := map[int]cs.ConsentStateSave{jsConsentAllowed: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, jsConsentDenied: cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED}[c.State]
		if got[c.Entity] != want {
			t.Errorf("consent %s…: stored %v; the reference wrote %v", c.Entity[:8], got[c.Entity], want)
		}
	}

	// Importing it again changes nothing (ARCH-016).
	res, err = importOver(t, svc.arch, owner, data)
	if err != nil || res.GetMessages().GetInserted() != 0 || res.GetGroups().GetInserted() != 0 {
		t.Errorf("second import: %v, %v", res, err)
	}
}

func importOver(t *testing.T, c cb.ArchiveServiceClient, owner string, data []byte) (*cb.ImportResponse, error) {
	t.Helper()
	stream, err := c.Import(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Start{Start: &cb.ImportStart{Owner: owner, Key: interopKey}}}); err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 {
		n := min(len(data), 4096)
		if stream.Send(&cb.ImportRequest{Payload: &cb.ImportRequest_Chunk{Chunk: data[:n]}}) != nil {
			break
		}
		data = data[n:]
	}
	return stream.CloseAndRecv()
}
