package server

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/contentapi"
	"github.com/contentbackup/contentbackup/internal/eventually"
	"github.com/contentbackup/contentbackup/internal/expiry"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/enginetest"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// Every test here runs on each store engine, through a real server on a
// loopback TCP port.
func forEachEngine(t *testing.T, fn func(t *testing.T, c cb.ConversationServiceClient, s store.Store)) {
	for _, e := range enginetest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Open(t)
			conn := startTCP(t, Config{Store: s, MaxAppendBatch: 10_000, MaxRecvBytes: 8 << 20})
			fn(t, cb.NewConversationServiceClient(conn), s)
		})
	}
}

func envelope(t testing.TB, ec *mc.EncodedContent) []byte {
	t.Helper()
	b, err := proto.Marshal(ec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func textEnvelope(t testing.TB, text string) []byte {
	t.Helper()
	ec, err := contentapi.Encode(codec.NewRegistry(), &cb.Content{Value: &cb.Content_Text{Text: text}})
	if err != nil {
		t.Fatal(err)
	}
	return envelope(t, ec)
}

func diff(t *testing.T, what string, got, want any) {
	t.Helper()
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("%s (-want +got):\n%s", what, d)
	}
}

func put(t *testing.T, c cb.ConversationServiceClient, owner string, g *gb.GroupSave) {
	t.Helper()
	if _, err := c.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
		t.Fatalf("PutGroup: %v", err)
	}
}

func appendMsgs(t *testing.T, c cb.ConversationServiceClient, owner string, msgs ...*mb.GroupMessageSave) *cb.AppendMessagesResponse {
	t.Helper()
	resp, err := c.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: owner, Messages: msgs})
	if err != nil {
		t.Fatalf("AppendMessages: %v", err)
	}
	return resp
}

func listAll(t *testing.T, c cb.ConversationServiceClient, owner string, group []byte) []*cb.StoredMessage {
	t.Helper()
	var out []*cb.StoredMessage
	req := &cb.ListMessagesRequest{Owner: owner, GroupId: group, PageSize: 1000}
	for {
		resp, err := c.ListMessages(t.Context(), req)
		if err != nil {
			t.Fatalf("ListMessages: %v", err)
		}
		out = append(out, resp.GetMessages()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func TestE2EConversationGroups(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("groups")
		full := storetest.FullGroup("group-1")
		resp, err := c.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: full})
		if err != nil || !resp.GetCreated() {
			t.Fatalf("PutGroup: %v, %v", resp, err)
		}
		got, err := c.GetGroup(t.Context(), &cb.GetGroupRequest{Owner: owner, GroupId: full.Id})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "every GroupSave field round-trips", got.GetGroup(), full)

		for i := range 5 {
			put(t, c, owner, storetest.MinimalGroup(fmt.Sprintf("group-%d", i+2)))
		}
		var ids []string
		req := &cb.ListGroupsRequest{Owner: owner, PageSize: 2}
		for pages := 0; pages < 10; pages++ {
			resp, err := c.ListGroups(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range resp.GetGroups() {
				ids = append(ids, strings.TrimRight(string(g.GetId()), "_"))
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		diff(t, "pages of 2", ids, []string{"group-1", "group-2", "group-3", "group-4", "group-5", "group-6"})
	})
}

func TestE2EConversationMessages_ARCH008_CTYPE008(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("messages")
		g := storetest.FullGroup("g")
		put(t, c, owner, g)

		// A typed envelope whose separate fields and retired enum disagree
		// with it: the envelope decides (ARCH-008), the bytes stay as sent.
		text := storetest.FullMessage("text", g.Id, 1)
		text.DecryptedMessageBytes = textEnvelope(t, "hello")
		text.AuthorityId, text.ContentType, text.VersionMajor, text.VersionMinor = "wrong.org", "wrong", 9, 9
		// An unknown custom type and bytes that are no envelope at all:
		// stored and returned unchanged, never dropped (CTYPE-008), and the
		// non-envelope keeps its separate fields (no invented type).
		custom := storetest.FullMessage("custom", g.Id, 2)
		custom.DecryptedMessageBytes = envelope(t, &mc.EncodedContent{
			Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 3, VersionMinor: 1}, Content: []byte{0xde, 0xad}, Fallback: proto.String("a poll"),
		})
		raw := storetest.FullMessage("raw", g.Id, 3)
		raw.DecryptedMessageBytes = []byte("\xff\xfe not protobuf")

		resp := appendMsgs(t, c, owner, text, custom, raw)
		if resp.GetInserted() != 3 || resp.GetUnchanged() != 0 {
			t.Fatalf("append: %v", resp)
		}
		stored := listAll(t, c, owner, g.Id)
		if len(stored) != 3 {
			t.Fatalf("listed %d messages", len(stored))
		}
		wantText := proto.Clone(text).(*mb.GroupMessageSave)
		wantText.AuthorityId, wantText.ContentType, wantText.VersionMajor, wantText.VersionMinor = "xmtp.org", "text", 1, 0
		wantCustom := proto.Clone(custom).(*mb.GroupMessageSave)
		wantCustom.AuthorityId, wantCustom.ContentType, wantCustom.VersionMajor, wantCustom.VersionMinor = "example.com", "poll", 3, 1
		diff(t, "text record", stored[0].GetMessage(), wantText)
		diff(t, "custom record", stored[1].GetMessage(), wantCustom)
		diff(t, "raw record", stored[2].GetMessage(), raw)

		if stored[0].GetDecoded().GetContent().GetText() != "hello" {
			t.Errorf("text decoded as %v", stored[0].GetDecoded())
		}
		u := stored[1].GetDecoded().GetUndecoded()
		if u.GetKind() != cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC || !bytes.Equal(u.GetEncodedContent(), custom.DecryptedMessageBytes) || u.GetFallback() != "a poll" {
			t.Errorf("custom decoded as %v", stored[1].GetDecoded())
		}
		u = stored[2].GetDecoded().GetUndecoded()
		if u.GetKind() != cb.UndecodedKind_UNDECODED_KIND_MALFORMED_ENVELOPE || !bytes.Equal(u.GetEncodedContent(), raw.DecryptedMessageBytes) {
			t.Errorf("raw decoded as %v", stored[2].GetDecoded())
		}

		// ARCH-013: a known id is left unchanged, and said so.
		again := storetest.Message("text", g.Id, 99)
		resp = appendMsgs(t, c, owner, again)
		if resp.GetUnchanged() != 1 || resp.GetOutcomes()[0] != cb.AppendOutcome_APPEND_OUTCOME_UNCHANGED {
			t.Errorf("re-append: %v", resp)
		}
		diff(t, "after re-append", listAll(t, c, owner, g.Id)[0].GetMessage(), wantText)

		// The window of ARCH-009: (start, end].
		w, err := c.ListMessages(t.Context(), &cb.ListMessagesRequest{Owner: owner, GroupId: g.Id, StartNs: proto.Int64(1), EndNs: proto.Int64(2)})
		if err != nil || len(w.GetMessages()) != 1 || string(w.GetMessages()[0].GetMessage().GetId()) != "custom" {
			t.Errorf("window (1, 2]: %v, %v", w, err)
		}
	})
}

func TestE2EConversationBulkAppend100k(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("bulk")
		put(t, c, owner, storetest.MinimalGroup("g"))
		const total, batch = 100_000, 10_000
		for i := 0; i < total; i += batch {
			msgs := storetest.Messages(fmt.Sprintf("b%02d", i/batch), storetest.GroupID("g"), batch, int64(i))
			for _, m := range msgs {
				m.DecryptedMessageBytes = textEnvelope(t, string(m.Id))
			}
			if resp := appendMsgs(t, c, owner, msgs...); resp.GetInserted() != batch {
				t.Fatalf("batch %d: %d inserted", i/batch, resp.GetInserted())
			}
		}
		stored := listAll(t, c, owner, storetest.GroupID("g"))
		if len(stored) != total {
			t.Fatalf("listed %d of %d", len(stored), total)
		}
		for i, m := range stored {
			if want := fmt.Sprintf("b%02d-%06d", i/batch, i%batch); string(m.GetMessage().GetId()) != want || m.GetDecoded().GetContent().GetText() != want {
				t.Fatalf("message %d: %s decoded %v", i, m.GetMessage().GetId(), m.GetDecoded())
			}
		}
	})
}

func TestE2EConversationConsent(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("consent")
		allowed := storetest.Consent("inbox-a", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 10)
		conv := storetest.Consent("conv-1", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 10)
		conv.EntityType = cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID
		resp, err := c.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{allowed, conv}})
		if err != nil {
			t.Fatal(err)
		}
		stored, unchanged := cb.ConsentOutcome_CONSENT_OUTCOME_STORED, cb.ConsentOutcome_CONSENT_OUTCOME_UNCHANGED
		diff(t, "first outcomes", resp.GetOutcomes(), []cb.ConsentOutcome{stored, stored})
		// Equal time keeps the stored record; greater replaces it; older
		// never does (NOTES.md's CONS-010 rule).
		same := storetest.Consent("inbox-a", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 10)
		older := storetest.Consent("inbox-a", cs.ConsentStateSave_CONSENT_STATE_SAVE_UNKNOWN, 9)
		newer := storetest.Consent("inbox-a", cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED, 11)
		resp, err = c.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{same, older}})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "equal and older", resp.GetOutcomes(), []cb.ConsentOutcome{unchanged, unchanged})
		resp, err = c.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{newer}})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "newer", resp.GetOutcomes(), []cb.ConsentOutcome{stored})
		var got []*cs.ConsentSave
		req := &cb.ListConsentRequest{Owner: owner, PageSize: 1}
		for range 5 {
			page, err := c.ListConsent(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.GetRecords()...)
			if req.PageToken = page.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		diff(t, "listed", got, []*cs.ConsentSave{conv, newer})
	})
}

func TestE2EConversation_ARCH015_RestoredGroupRefusesAppendsUntilActivated(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, s store.Store) {
		owner := storetest.Owner("restored")
		archived := storetest.FullGroup("restored-group")
		// Import is what creates Restored groups; the archive service is
		// not here yet, so the test merges through the store as it will.
		if _, err := s.MergeGroups(t.Context(), owner, []*gb.GroupSave{archived}); err != nil {
			t.Fatal(err)
		}
		got, err := c.GetGroup(t.Context(), &cb.GetGroupRequest{Owner: owner, GroupId: archived.Id})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "ARCH-020 historical metadata exposed", got.GetGroup(), storetest.RestoredForm(archived))

		_, err = c.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: owner, Messages: []*mb.GroupMessageSave{storetest.Message("m", archived.Id, 1)}})
		wantCode(t, err, codes.FailedPrecondition, fmt.Sprintf("group %x", archived.Id))
		wantCode(t, err, codes.FailedPrecondition, "inactive")
		_, err = c.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: owner, Group: storetest.MinimalGroup("restored-group")})
		wantCode(t, err, codes.FailedPrecondition, "inactive")
		if n := len(listAll(t, c, owner, archived.Id)); n != 0 {
			t.Fatalf("a refused append stored %d messages", n)
		}

		act, err := c.ActivateGroup(t.Context(), &cb.ActivateGroupRequest{Owner: owner, GroupId: archived.Id})
		if err != nil || !act.GetActivated() || act.GetGroup().GetMembershipState() != gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED {
			t.Fatalf("ActivateGroup: %v, %v", act, err)
		}
		act, err = c.ActivateGroup(t.Context(), &cb.ActivateGroupRequest{Owner: owner, GroupId: archived.Id})
		if err != nil || act.GetActivated() {
			t.Errorf("second ActivateGroup: %v, %v; want no change", act, err)
		}
		appendMsgs(t, c, owner, storetest.Message("m", archived.Id, 1))

		pending := storetest.MinimalGroup("pending")
		pending.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_PENDING
		put(t, c, owner, pending)
		_, err = c.ActivateGroup(t.Context(), &cb.ActivateGroupRequest{Owner: owner, GroupId: pending.Id})
		wantCode(t, err, codes.FailedPrecondition, "not restored")
		_, err = c.ActivateGroup(t.Context(), &cb.ActivateGroupRequest{Owner: owner, GroupId: []byte("nope")})
		wantCode(t, err, codes.NotFound, "group 6e6f7065")
	})
}

// deletionTarget is a message of type t (kind application unless said)
// sent by "alice".
func deletionTarget(t *testing.T, id string, group []byte, typ *mc.ContentTypeId, content []byte) *mb.GroupMessageSave {
	m := storetest.Message(id, group, 1)
	m.SenderInboxId = "alice"
	if typ != nil {
		m.DecryptedMessageBytes = envelope(t, &mc.EncodedContent{Type: typ, Content: content})
	} else {
		m.DecryptedMessageBytes = content
	}
	return m
}

func TestE2EConversationDelete_CTYPE018_EveryCatalogueRow(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("delete-types")
		g := storetest.MinimalGroup("g")
		put(t, c, owner, g)
		type target struct {
			msg       *mb.GroupMessageSave
			deletable bool
		}
		var targets []target
		for _, e := range codec.Entries() {
			targets = append(targets, target{deletionTarget(t, e.Type.String(), g.Id, e.Type.Proto(), storetest.GroupID("x")), e.Deletable})
			// A later minor version matches the same row (CTYPE-001).
			later := e.Type
			later.Minor = 5
			targets = append(targets, target{deletionTarget(t, later.String(), g.Id, later.Proto(), storetest.GroupID("x")), e.Deletable})
		}
		text := codec.TypeText.Proto()
		membership := deletionTarget(t, "text-as-membership-change", g.Id, text, storetest.GroupID("x"))
		membership.Kind = mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_MEMBERSHIP_CHANGE
		targets = append(targets,
			target{deletionTarget(t, "legacy-reaction-1.0", g.Id, codec.TypeLegacyReaction.Proto(), []byte("{}")), false},
			target{deletionTarget(t, "custom", g.Id, &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "text", VersionMajor: 1}, nil), false},
			target{deletionTarget(t, "text-2.0", g.Id, &mc.ContentTypeId{AuthorityId: "xmtp.org", TypeId: "text", VersionMajor: 2}, nil), false},
			target{deletionTarget(t, "not-an-envelope", g.Id, nil, []byte("\xff\xff")), false},
			target{membership, false},
		)
		for _, tg := range targets {
			appendMsgs(t, c, owner, tg.msg)
		}
		for _, tg := range targets {
			_, err := c.DeleteMessage(t.Context(), &cb.DeleteMessageRequest{Owner: owner, GroupId: g.Id, MessageId: tg.msg.Id, ActorInboxId: "alice"})
			if tg.deletable {
				if err != nil {
					t.Errorf("%s: %v; want deleted", tg.msg.Id, err)
				}
				continue
			}
			if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "CTYPE-018") || reason(err) != "NOT_DELETABLE" {
				t.Errorf("%s: %v; want FAILED_PRECONDITION citing CTYPE-018", tg.msg.Id, err)
			}
		}
		left := map[string]bool{}
		for _, m := range listAll(t, c, owner, g.Id) {
			left[string(m.GetMessage().GetId())] = true
		}
		for _, tg := range targets {
			if left[string(tg.msg.Id)] == tg.deletable {
				t.Errorf("%s: still stored %v, deletable %v", tg.msg.Id, left[string(tg.msg.Id)], tg.deletable)
			}
		}
	})
}

func TestE2EConversationDelete_PROC037_SenderOrSuperAdmin(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, s store.Store) {
		owner := storetest.Owner("delete-authority")
		g := storetest.FullGroup("g") // admins admin-1, admin-2; super admin super-1
		put(t, c, owner, g)
		text := codec.TypeText.Proto()
		for _, id := range []string{"m1", "m2", "m3"} {
			appendMsgs(t, c, owner, deletionTarget(t, id, g.Id, text, []byte("hi")))
		}
		del := func(group []byte, id, actor string) error {
			_, err := c.DeleteMessage(t.Context(), &cb.DeleteMessageRequest{Owner: owner, GroupId: group, MessageId: []byte(id), ActorInboxId: actor})
			return err
		}
		for _, actor := range []string{"bob", "admin-1", "ALICE"} {
			err := del(g.Id, "m1", actor)
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "PROC-037") {
				t.Errorf("%s deletes alice's message: %v; want PERMISSION_DENIED", actor, err)
			}
		}
		if err := del(g.Id, "m1", "alice"); err != nil {
			t.Errorf("the sender deletes: %v", err)
		}
		if err := del(g.Id, "m2", "super-1"); err != nil {
			t.Errorf("a super admin deletes: %v", err)
		}
		// The target must be in the group named.
		put(t, c, owner, storetest.MinimalGroup("other"))
		wantCode(t, del(storetest.GroupID("other"), "m3", "alice"), codes.NotFound, "message 6d33")
		ids := func() (out []string) {
			for _, m := range listAll(t, c, owner, g.Id) {
				out = append(out, string(m.GetMessage().GetId()))
			}
			return out
		}
		diff(t, "left", ids(), []string{"m3"})

		// A restored group's super-admin list is history, not authority.
		archived := storetest.FullGroup("restored")
		if _, err := s.MergeGroups(t.Context(), owner, []*gb.GroupSave{archived}); err != nil {
			t.Fatal(err)
		}
		imported := deletionTarget(t, "r1", archived.Id, text, nil)
		records.DeriveIdentifiers(imported) // as import does (ARCH-008)
		if _, err := s.AppendMessages(t.Context(), owner, []*mb.GroupMessageSave{imported}, store.AppendOptions{AllowRestored: true}); err != nil {
			t.Fatal(err)
		}
		wantCode(t, del(archived.Id, "r1", "super-1"), codes.PermissionDenied, "PROC-037")
		if err := del(archived.Id, "r1", "alice"); err != nil {
			t.Errorf("the sender deletes in a restored group: %v", err)
		}
	})
}

func TestE2EConversationOwnerIsolation(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, s store.Store) {
		a, b, nobody := storetest.Owner("a"), storetest.Owner("b"), storetest.Owner("nobody")
		g := storetest.FullGroup("secret-group")
		put(t, c, a, g)
		msg := deletionTarget(t, "secret-message", g.Id, codec.TypeText.Proto(), storetest.GroupID("x"))
		msg.SenderInboxId = b // even as the message's sender, B acts only on B's store
		appendMsgs(t, c, a, msg)
		if _, err := c.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: a, Records: []*cs.ConsentSave{storetest.Consent("x", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 1)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MergeGroups(t.Context(), a, []*gb.GroupSave{storetest.FullGroup("restored")}); err != nil {
			t.Fatal(err)
		}

		// Each call B makes on A's records fails exactly as it does for an
		// owner with no records at all: B cannot learn that they exist.
		calls := map[string]func(owner string) error{
			"GetGroup": func(o string) error {
				_, err := c.GetGroup(t.Context(), &cb.GetGroupRequest{Owner: o, GroupId: g.Id})
				return err
			},
			"ListMessages": func(o string) error {
				_, err := c.ListMessages(t.Context(), &cb.ListMessagesRequest{Owner: o, GroupId: g.Id})
				return err
			},
			"AppendMessages": func(o string) error {
				_, err := c.AppendMessages(t.Context(), &cb.AppendMessagesRequest{Owner: o, Messages: []*mb.GroupMessageSave{storetest.Message("intruder", g.Id, 1)}})
				return err
			},
			"DeleteMessage": func(o string) error {
				_, err := c.DeleteMessage(t.Context(), &cb.DeleteMessageRequest{Owner: o, GroupId: g.Id, MessageId: msg.Id, ActorInboxId: b})
				return err
			},
			"ActivateGroup": func(o string) error {
				_, err := c.ActivateGroup(t.Context(), &cb.ActivateGroupRequest{Owner: o, GroupId: storetest.GroupID("restored")})
				return err
			},
		}
		for name, call := range calls {
			errB, errNobody := call(b), call(nobody)
			if status.Code(errB) != codes.NotFound || status.Convert(errB).Message() != status.Convert(errNobody).Message() {
				t.Errorf("%s: B gets %v; an owner with nothing gets %v", name, errB, errNobody)
			}
		}
		groups, err := c.ListGroups(t.Context(), &cb.ListGroupsRequest{Owner: b})
		if err != nil || len(groups.GetGroups()) != 0 {
			t.Errorf("B lists groups: %v, %v", groups, err)
		}
		consent, err := c.ListConsent(t.Context(), &cb.ListConsentRequest{Owner: b})
		if err != nil || len(consent.GetRecords()) != 0 {
			t.Errorf("B lists consent: %v, %v", consent, err)
		}
		// B's put of the same id makes B's own group; A's stays as it was.
		if resp, err := c.PutGroup(t.Context(), &cb.PutGroupRequest{Owner: b, Group: storetest.MinimalGroup("secret-group")}); err != nil || !resp.GetCreated() {
			t.Errorf("B puts the same id: %v, %v", resp, err)
		}
		got, _ := c.GetGroup(t.Context(), &cb.GetGroupRequest{Owner: a, GroupId: g.Id})
		diff(t, "A's group", got.GetGroup(), g)
		if n := len(listAll(t, c, a, g.Id)); n != 1 {
			t.Errorf("A has %d messages; want 1", n)
		}
		r, _ := c.GetGroup(t.Context(), &cb.GetGroupRequest{Owner: a, GroupId: storetest.GroupID("restored")})
		if r.GetGroup().GetMembershipState() != gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED {
			t.Errorf("A's restored group is %v", r.GetGroup().GetMembershipState())
		}
	})
}

func TestE2EConversationBadInput(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("bad")
		g := storetest.FullGroup("g")
		put(t, c, owner, g)
		msg := storetest.FullMessage("m", g.Id, 1)
		appendMsgs(t, c, owner, msg)
		consent := storetest.Consent("x", cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, 5)
		if _, err := c.SetConsent(t.Context(), &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{consent}}); err != nil {
			t.Fatal(err)
		}

		withGroup := func(f func(*gb.GroupSave)) *gb.GroupSave {
			x := storetest.FullGroup("g")
			f(x)
			return x
		}
		withMsg := func(f func(*mb.GroupMessageSave)) []*mb.GroupMessageSave {
			x := storetest.FullMessage("m2", g.Id, 2)
			f(x)
			return []*mb.GroupMessageSave{storetest.Message("ok", g.Id, 3), x}
		}
		ctx := t.Context()
		tests := []struct {
			name     string
			call     func() error
			code     codes.Code
			mentions string
		}{
			{"empty owner", func() error { _, err := c.GetGroup(ctx, &cb.GetGroupRequest{GroupId: g.Id}); return err }, codes.InvalidArgument, "owner: required"},
			{"owner with spaces", func() error { _, err := c.ListGroups(ctx, &cb.ListGroupsRequest{Owner: "a b"}); return err }, codes.InvalidArgument, "owner: whitespace"},
			{"oversized owner", func() error {
				_, err := c.ListConsent(ctx, &cb.ListConsentRequest{Owner: strings.Repeat("o", 257)})
				return err
			}, codes.InvalidArgument, "owner: 257 bytes exceed"},
			{"empty group id", func() error { _, err := c.GetGroup(ctx, &cb.GetGroupRequest{Owner: owner}); return err }, codes.InvalidArgument, "group_id: required"},
			{"oversized group id", func() error {
				_, err := c.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: withGroup(func(x *gb.GroupSave) { x.Id = bytes.Repeat([]byte{1}, 257) })})
				return err
			}, codes.InvalidArgument, "group.id: 257 bytes exceed"},
			{"no group", func() error { _, err := c.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner}); return err }, codes.InvalidArgument, "group: required"},
			{"put restored", func() error {
				_, err := c.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: withGroup(func(x *gb.GroupSave) {
					x.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED
				})})
				return err
			}, codes.InvalidArgument, "RESTORED is set only by archive import"},
			{"conversation type out of range", func() error {
				_, err := c.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: withGroup(func(x *gb.GroupSave) { x.ConversationType = -1 })})
				return err
			}, codes.InvalidArgument, "group.conversation_type: -1"},
			{"NUL in an attribute", func() error {
				_, err := c.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: withGroup(func(x *gb.GroupSave) { x.MutableMetadata.Attributes["group_name"] = "a\x00b" })})
				return err
			}, codes.InvalidArgument, `group.mutable_metadata.attributes["group_name"]: contains a NUL`},
			{"no messages", func() error { _, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner}); return err }, codes.InvalidArgument, "messages: at least one"},
			{"message for a missing group", func() error {
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: withMsg(func(x *mb.GroupMessageSave) { x.GroupId = []byte("missing") })})
				return err
			}, codes.NotFound, "group 6d697373696e67 of message 6d32: not found"},
			{"empty message id", func() error {
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: withMsg(func(x *mb.GroupMessageSave) { x.Id = nil })})
				return err
			}, codes.InvalidArgument, "messages[1].id: required"},
			{"oversized message id", func() error {
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: withMsg(func(x *mb.GroupMessageSave) { x.Id = make([]byte, 300) })})
				return err
			}, codes.InvalidArgument, "messages[1].id: 300 bytes exceed"},
			{"kind out of range", func() error {
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: withMsg(func(x *mb.GroupMessageSave) { x.Kind = 42 })})
				return err
			}, codes.InvalidArgument, "messages[1].kind: 42 is not a GroupMessageKindSave value"},
			{"delivery status out of range", func() error {
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: withMsg(func(x *mb.GroupMessageSave) { x.DeliveryStatus = 7 })})
				return err
			}, codes.InvalidArgument, "messages[1].delivery_status: 7"},
			{"deadline without known expiry", func() error {
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: withMsg(func(x *mb.GroupMessageSave) { x.ExpiryKnown = nil })})
				return err
			}, codes.InvalidArgument, "messages[1].expires_at_ns: set while expiry_known is not true"},
			{"too many messages", func() error {
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: storetest.Messages("many", g.Id, 10_001, 0)})
				return err
			}, codes.InvalidArgument, "messages: 10001 exceed the limit of 10000"},
			{"oversized request", func() error {
				big := storetest.Message("big", g.Id, 1)
				big.DecryptedMessageBytes = make([]byte, 9<<20)
				_, err := c.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: []*mb.GroupMessageSave{big}})
				return err
			}, codes.ResourceExhausted, "larger than max"},
			{"page size too large", func() error {
				_, err := c.ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: g.Id, PageSize: 5000})
				return err
			}, codes.InvalidArgument, "page_size: 5000 exceeds the limit of 1000"},
			{"negative page size", func() error {
				_, err := c.ListGroups(ctx, &cb.ListGroupsRequest{Owner: owner, PageSize: -1})
				return err
			}, codes.InvalidArgument, "page_size: -1"},
			{"foreign page token", func() error {
				groups, _ := c.ListGroups(ctx, &cb.ListGroupsRequest{Owner: owner, PageSize: 1})
				_, err := c.ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: g.Id, PageToken: groups.GetNextPageToken()})
				return err
			}, codes.InvalidArgument, "page_token"},
			{"garbage page token", func() error {
				_, err := c.ListConsent(ctx, &cb.ListConsentRequest{Owner: owner, PageToken: "!!"})
				return err
			}, codes.InvalidArgument, "page_token"},
			{"window backwards", func() error {
				_, err := c.ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: g.Id, StartNs: proto.Int64(5), EndNs: proto.Int64(4)})
				return err
			}, codes.InvalidArgument, "start_ns: 5 is after end_ns 4"},
			{"list messages of a missing group", func() error {
				_, err := c.ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: []byte("nope")})
				return err
			}, codes.NotFound, "group 6e6f7065: not found"},
			{"delete without actor", func() error {
				_, err := c.DeleteMessage(ctx, &cb.DeleteMessageRequest{Owner: owner, GroupId: g.Id, MessageId: msg.Id})
				return err
			}, codes.InvalidArgument, "actor_inbox_id: required"},
			{"delete a missing message", func() error {
				_, err := c.DeleteMessage(ctx, &cb.DeleteMessageRequest{Owner: owner, GroupId: g.Id, MessageId: []byte("zz"), ActorInboxId: "sender-inbox"})
				return err
			}, codes.NotFound, "message 7a7a"},
			{"consent state out of range", func() error {
				_, err := c.SetConsent(ctx, &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{consent, {EntityType: 1, State: 9, Entity: "y"}}})
				return err
			}, codes.InvalidArgument, "records[1].state: 9 is not a ConsentStateSave value"},
			{"consent entity past the index bound", func() error {
				_, err := c.SetConsent(ctx, &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{{EntityType: 1, State: 2, Entity: strings.Repeat("e", 2049)}}})
				return err
			}, codes.InvalidArgument, "records[0].entity: 2049 bytes exceed the limit of 2048"},
			{"consent type unspecified", func() error {
				_, err := c.SetConsent(ctx, &cb.SetConsentRequest{Owner: owner, Records: []*cs.ConsentSave{{State: 2, Entity: "y", ConsentedAtNs: 99}}})
				return err
			}, codes.InvalidArgument, "records[0].entity_type: required"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				wantCode(t, tc.call(), tc.code, tc.mentions)
			})
		}

		// A field error says which field in a BadRequest detail too.
		_, err := c.GetGroup(ctx, &cb.GetGroupRequest{Owner: owner})
		var field string
		for _, d := range status.Convert(err).Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.FieldViolations) == 1 {
				field = br.FieldViolations[0].GetField()
			}
		}
		if field != "group_id" {
			t.Errorf("BadRequest field %q; want group_id", field)
		}

		// Nothing stored changed.
		got, err := c.GetGroup(ctx, &cb.GetGroupRequest{Owner: owner, GroupId: g.Id})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "group after bad input", got.GetGroup(), g)
		var msgs []*mb.GroupMessageSave
		for _, m := range listAll(t, c, owner, g.Id) {
			msgs = append(msgs, m.GetMessage())
		}
		diff(t, "messages after bad input", msgs, []*mb.GroupMessageSave{msg})
		cons, err := c.ListConsent(ctx, &cb.ListConsentRequest{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "consent after bad input", cons.GetRecords(), []*cs.ConsentSave{consent})
	})
}

func TestE2EConversationListPageBudget(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, _ store.Store) {
		owner := storetest.Owner("budget")
		putPageBytesGroup(t, c, owner)
		req := &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g")}
		var pages []int
		total := 0
		for {
			page, err := c.ListMessages(t.Context(), req, grpc.MaxCallRecvMsgSize(64<<20))
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, len(page.GetMessages()))
			total += len(page.GetMessages())
			if n := len(page.GetMessages()); n > 1 && proto.Size(page) > DefaultLimits.ListPageBytes {
				t.Errorf("a page of %d messages is %d bytes, over the %d-byte page limit", n, proto.Size(page), DefaultLimits.ListPageBytes)
			}
			if req.PageToken = page.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		if total != 13 || pages[0] != 2 || pages[len(pages)-1] != 1 {
			t.Errorf("pages %v; want 13 messages, two a page, the 5 MiB one alone", pages)
		}
	})
}

// putLargeMessages stores group "g" of batches × perBatch messages of size
// bytes each (not envelopes), one AppendMessages a batch, sent at 0, 1, …
// then 10, 11, … a batch apart.
func putLargeMessages(t *testing.T, c cb.ConversationServiceClient, owner string, batches, perBatch, size int) {
	t.Helper()
	put(t, c, owner, storetest.MinimalGroup("g"))
	for i := range batches {
		msgs := storetest.Messages(fmt.Sprintf("p%02d", i), storetest.GroupID("g"), perBatch, int64(i*10))
		for _, m := range msgs {
			m.DecryptedMessageBytes = bytes.Repeat([]byte{byte(i)}, size)
		}
		appendMsgs(t, c, owner, msgs...)
	}
}

// putPageBytesGroup stores group "g" of 12 messages of 700 KiB, not
// envelopes: each comes back twice (stored, and as Undecoded's bytes), 1.4
// MiB of the 4 MiB page limit, so a page holds two; and one of 5 MiB,
// larger than a page, which comes back alone.
func putPageBytesGroup(t *testing.T, c cb.ConversationServiceClient, owner string) {
	t.Helper()
	putLargeMessages(t, c, owner, 3, 4, 700<<10)
	huge := storetest.Message("zz-huge", storetest.GroupID("g"), 1000)
	huge.DecryptedMessageBytes = bytes.Repeat([]byte{9}, 5<<20)
	appendMsgs(t, c, owner, huge)
}

// TestListMessagesReaderEnds: a page cut short by its byte limit, or
// refused by the call budget, ends the goroutine that read it.
func TestListMessagesReaderEnds(t *testing.T) {
	s := enginetest.SQLite(t)
	owner := storetest.Owner("reader")
	ctx := t.Context()
	if _, err := s.PutGroup(ctx, owner, storetest.MinimalGroup("g")); err != nil {
		t.Fatal(err)
	}
	// Not envelopes: each comes back twice (stored, and as Undecoded's
	// bytes), so decoding ends a page at half the content the reader reads
	// for it, with the reader batches ahead and blocked.
	msgs := storetest.Messages("m", storetest.GroupID("g"), 1000, 1)
	for _, m := range msgs {
		m.DecryptedMessageBytes = bytes.Repeat([]byte{1}, 100)
	}
	if _, err := s.AppendMessages(ctx, owner, msgs, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	limits := DefaultLimits
	limits.ListPageBytes = 40 << 10 // a few messages a page
	svc := NewConversationService(s, codec.NewRegistry(), ConversationOptions{Limits: limits, Pool: budget.NewPool(1 << 30)})
	req := &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g"), PageSize: 1000}
	listed := 0
	for {
		resp, err := svc.ListMessages(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		listed += len(resp.GetMessages())
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if listed != 1000 {
		t.Errorf("listed %d of 1000", listed)
	}
	// A budget too small for even the first message: refused, and the
	// reader ends too.
	tiny := NewConversationService(s, codec.NewRegistry(), ConversationOptions{Limits: limits, Pool: budget.NewPool(64)})
	if _, err := tiny.ListMessages(ctx, &cb.ListMessagesRequest{Owner: owner, GroupId: storetest.GroupID("g")}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("under a 64-byte budget: %v", err)
	}
	if n := pageReadersLeft(); n > 0 {
		t.Errorf("%d page readers still run after listing", n)
	}
}

// pageReadersLeft waits up to 5 s for every page reader (readPage's
// goroutine) to end, and returns how many still run.
func pageReadersLeft() int {
	const reader = "(*ConversationService).readPage.func"
	eventually.Within(5*time.Second, func() bool { return eventually.Goroutines(reader) == 0 })
	return eventually.Goroutines(reader)
}

// TestE2EConversation_META051_ExpiredMessagesLeave: a disappearing
// message is listed until its deadline and not after, whether or not the
// purge has run; the purge then deletes it from the store, and nothing
// else.
func TestE2EConversation_META051_ExpiredMessagesLeave(t *testing.T) {
	forEachEngine(t, func(t *testing.T, c cb.ConversationServiceClient, s store.Store) {
		g := storetest.FullGroup("g")
		put(t, c, "alice", g)
		soon := time.Now().Add(time.Second).UnixNano()
		known := true
		fleeting := storetest.Message("fleeting", g.GetId(), 1000)
		fleeting.ExpiresAtNs, fleeting.ExpiryKnown = &soon, &known
		lasting := storetest.Message("lasting", g.GetId(), 1001)
		appendMsgs(t, c, "alice", fleeting, lasting)
		if n := len(listAll(t, c, "alice", g.GetId())); n != 2 {
			t.Fatalf("before the deadline: %d messages listed, want 2", n)
		}
		eventually.True(t, 10*time.Second, func() bool { return len(listAll(t, c, "alice", g.GetId())) == 1 },
			func() string { return "the expired message is still listed" })
		if got := listAll(t, c, "alice", g.GetId()); string(got[0].GetMessage().GetId()) != "lasting" {
			t.Errorf("listed %q, want the lasting message", got[0].GetMessage().GetId())
		}
		n, err := expiry.New(expiry.Config{Store: s}).RunOnce(t.Context(), time.Now())
		if err != nil || n != 1 {
			t.Fatalf("purge: %d deleted, %v; want 1", n, err)
		}
		page, err := s.ListMessages(t.Context(), "alice", store.MessageQuery{GroupID: g.GetId(), Limit: 10})
		if err != nil || len(page.Messages) != 1 || string(page.Messages[0].GetId()) != "lasting" {
			t.Errorf("the store after the purge: %v, %v", page.Messages, err)
		}
	})
}
