package interop

import (
	"encoding/hex"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// TestReferenceAcceptsEveryShape: every shape of record our API accepts,
// exported, is imported whole by the reference: each delivery status and
// retired content-type value, a message with no sender installation, each
// group and DM membership state and consent type and state. The reference
// stops a whole import at a record it refuses, so one refused shape would
// lose every message after it; this test fails if the door lets one in.
func TestReferenceAcceptsEveryShape(t *testing.T) {
	svc := startServices(t)
	ctx := t.Context()
	owner := inboxID("shapes-owner")
	reg := codec.NewRegistry()

	var groups []*gb.GroupSave
	for i, state := range []gb.GroupMembershipStateSave{
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_REJECTED,
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_PENDING,
		gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_PENDING_REMOVE,
	} {
		for _, typ := range []gb.ConversationTypeSave{gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP, gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM} {
			g := &gb.GroupSave{
				Id: id32(fmt.Sprintf("shape group %d %d", i, typ))[:16], CreatedAtNs: 1_700_000_000_000_000_000 + int64(i),
				MembershipState: state, ConversationType: typ, AddedByInboxId: owner,
				Metadata: &gb.ImmutableMetadataSave{CreatorInboxId: owner},
			}
			if typ == gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM {
				g.DmId = proto.String(fmt.Sprintf("dm:%s:%s", owner, inboxID(fmt.Sprint("peer", i))))
			} else {
				g.MutableMetadata = &gb.MutableMetadataSave{SuperAdminList: []string{owner}}
			}
			if _, err := svc.conv.PutGroup(ctx, &cb.PutGroupRequest{Owner: owner, Group: g}); err != nil {
				t.Fatalf("PutGroup %v %v: %v", state, typ, err)
			}
			groups = append(groups, g)
		}
	}

	var msgs []*mb.GroupMessageSave
	n := 0
	add := func(mutate func(*mb.GroupMessageSave)) {
		env, err := reg.Encode(codec.TypeText, fmt.Sprint("shape ", n))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.Marshal(env)
		m := &mb.GroupMessageSave{
			Id: id32(fmt.Sprint("shape message ", n)), GroupId: groups[n%len(groups)].Id, DecryptedMessageBytes: b,
			SentAtNs: 1_700_000_000_000_000_100 + int64(n), Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION,
			SenderInstallationId: id32("installation"), SenderInboxId: owner,
			DeliveryStatus: mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED, ExpiryKnown: proto.Bool(true),
		}
		mutate(m)
		msgs = append(msgs, m)
		n++
	}
	for _, ds := range []mb.DeliveryStatusSave{mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_UNPUBLISHED, mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED, mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_FAILED} {
		add(func(m *mb.GroupMessageSave) { m.DeliveryStatus = ds })
	}
	for v := range mb.ContentTypeSave_name {
		//lint:ignore SA1019 the retired field is still written as given (ARCH-004), and must import
		add(func(m *mb.GroupMessageSave) { m.ContentTypeSave = mb.ContentTypeSave(v) })
	}
	add(func(m *mb.GroupMessageSave) { m.SenderInstallationId = nil })
	add(func(m *mb.GroupMessageSave) { m.ExpiryKnown = nil })
	add(func(m *mb.GroupMessageSave) { m.ExpiresAtNs = proto.Int64(4_000_000_000_000_000_000) })
	add(func(m *mb.GroupMessageSave) { m.SequenceId, m.OriginatorId = proto.Int64(7), proto.Int64(100) })
	for len(msgs) < 2*len(groups) { // at least one message in every conversation
		add(func(*mb.GroupMessageSave) {})
	}
	if _, err := svc.conv.AppendMessages(ctx, &cb.AppendMessagesRequest{Owner: owner, Messages: msgs}); err != nil {
		t.Fatalf("AppendMessages: %v", err)
	}

	var consent []*cs.ConsentSave
	var query []map[string]any
	for _, typ := range []cs.ConsentTypeSave{cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID, cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID} {
		for _, state := range []cs.ConsentStateSave{cs.ConsentStateSave_CONSENT_STATE_SAVE_UNKNOWN, cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, cs.ConsentStateSave_CONSENT_STATE_SAVE_DENIED} {
			entity := inboxID(fmt.Sprint("consent ", typ, state))
			if typ == cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID {
				entity = hex.EncodeToString(id32(fmt.Sprint("consent ", typ, state))[:16])
			}
			consent = append(consent, &cs.ConsentSave{EntityType: typ, State: state, Entity: entity, ConsentedAtNs: 5})
			jsType := jsConsentInboxID
			if typ == cs.ConsentTypeSave_CONSENT_TYPE_SAVE_CONVERSATION_ID {
				jsType = jsConsentGroupID
			}
			query = append(query, map[string]any{"entityType": jsType, "entity": entity})
		}
	}
	if _, err := svc.conv.SetConsent(ctx, &cb.SetConsentRequest{Owner: owner, Records: consent}); err != nil {
		t.Fatalf("SetConsent: %v", err)
	}

	data, summary := exportOver(t, svc.arch, owner)
	if summary.GetMessages() != uint64(len(msgs)) || summary.GetGroups() != uint64(len(groups)) || summary.GetConsentRecords() != uint64(len(consent)) {
		t.Fatalf("exported %v; stored %d groups, %d messages, %d consent", summary, len(groups), len(msgs), len(consent))
	}
	var view refArchiveView
	runScript(t, "archive.mjs", "import", map[string]any{"key": hex.EncodeToString(interopKey), "archive": hex.EncodeToString(data), "consent": query}, &view)
	// Every conversation arrived with its messages (the reference's own
	// conversation listing leaves some states out, so count by message).
	got, convs := map[string]bool{}, map[string]bool{}
	for _, m := range view.Messages {
		got[m.ID], convs[m.ConvoID] = true, true
	}
	for _, g := range groups {
		if !convs[hex.EncodeToString(g.Id)] {
			t.Errorf("conversation %x (%v, %v) is not in the reference after import", g.Id, g.MembershipState, g.ConversationType)
		}
	}
	for i, m := range msgs {
		if !got[hex.EncodeToString(m.Id)] {
			t.Errorf("message %d (%v) is not in the reference after import", i, m)
		}
	}
	if len(view.Consent) != len(consent) {
		t.Errorf("the reference answered %d consent queries of %d", len(view.Consent), len(consent))
	}
}
