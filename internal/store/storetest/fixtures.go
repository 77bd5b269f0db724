// Package storetest is the conformance suite every store engine passes:
// each rule of the store is written once here and run against SQLite and
// Postgres alike, the way SpiceDB's datastore tests run against every
// engine. An engine's own test calls Run with a function that opens a
// fresh store of it.
package storetest

//lint:file-ignore SA1019 content_type_save is retired but still stored and returned as given (ARCH-004, ARCH-008).

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"strings"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// Owner returns a fresh owner name, so that tests sharing a database never
// see each other's records.
func Owner(label string) string {
	return label + "-" + strings.ToLower(rand.Text())
}

func ptr[T any](v T) *T { return &v }

// DMID is a DM id in the form the reference client writes and parses:
// "dm:" and two 64-character inbox ids.
var DMID = "dm:" + strings.Repeat("a", 64) + ":" + strings.Repeat("b", 64)

// GroupID is a 16-byte group id named name, as the reference client's
// import (and so the service) requires: name padded with '_', or a digest
// of a longer name.
func GroupID(name string) []byte {
	if len(name) > 16 {
		sum := sha256.Sum256([]byte(name))
		return sum[:16]
	}
	return []byte(name + strings.Repeat("_", 16-len(name)))
}

// FullGroup is fullGroup with the 16-byte id GroupID(name): a group the
// service accepts.
func FullGroup(name string) *gb.GroupSave {
	g := fullGroup(name)
	g.Id = GroupID(name)
	return g
}

// MinimalGroup is minimalGroup with the 16-byte id GroupID(name).
func MinimalGroup(name string) *gb.GroupSave {
	g := minimalGroup(name)
	g.Id = GroupID(name)
	return g
}

// fullGroup is a group with every GroupSave field set to a value other
// than its default, with id as it is: the store keeps any id.
func fullGroup(id string) *gb.GroupSave {
	return &gb.GroupSave{
		Id:                       []byte(id),
		CreatedAtNs:              1_700_000_000_000_000_001,
		MembershipState:          gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		InstallationsLastChecked: 1_700_000_000_000_000_002,
		AddedByInboxId:           "adder-inbox",
		WelcomeId:                ptr(int64(42)),
		RotatedAtNs:              1_700_000_000_000_000_003,
		ConversationType:         gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP,
		DmId:                     ptr(DMID),
		LastMessageNs:            ptr(int64(1_700_000_000_000_000_004)),
		MessageDisappearFromNs:   ptr(int64(1_700_000_000_000_000_005)),
		MessageDisappearInNs:     ptr(int64(86_400_000_000_000)),
		Metadata:                 &gb.ImmutableMetadataSave{CreatorInboxId: "creator-inbox"},
		MutableMetadata: &gb.MutableMetadataSave{
			Attributes:     map[string]string{"group_name": "Weekend plans", "description": "ünïcode ✓", "empty": ""},
			AdminList:      []string{"admin-1", "admin-2"},
			SuperAdminList: []string{"super-1"},
		},
		PausedForVersion: ptr("1.2.3"),
	}
}

// minimalGroup is a group with only what a group needs: id, state and
// type.
func minimalGroup(id string) *gb.GroupSave {
	return &gb.GroupSave{
		Id:               []byte(id),
		MembershipState:  gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP,
	}
}

// FullMessage is a message of group with every GroupMessageSave field set.
func FullMessage(id string, group []byte, sentAt int64) *mb.GroupMessageSave {
	return &mb.GroupMessageSave{
		Id:                    []byte(id),
		GroupId:               group,
		DecryptedMessageBytes: []byte("\x00\x01not an envelope\xff"),
		SentAtNs:              sentAt,
		Kind:                  mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION,
		SenderInstallationId:  []byte("installation-0123456789abcdef"),
		SenderInboxId:         "sender-inbox",
		DeliveryStatus:        mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED,
		ContentTypeSave:       mb.ContentTypeSave_CONTENT_TYPE_SAVE_TEXT,
		VersionMajor:          1,
		VersionMinor:          7,
		AuthorityId:           "example.com",
		ReferenceId:           []byte("reference"),
		SequenceId:            ptr(int64(9)),
		OriginatorId:          ptr(int64(100)),
		ContentType:           "custom",
		ExpiresAtNs:           ptr(int64(4_000_000_000_000_000_000)), // 2096: far enough that no test sees it expire
		ExpiryKnown:           ptr(true),
	}
}

// Message is a plain application message of group.
func Message(id string, group []byte, sentAt int64) *mb.GroupMessageSave {
	return &mb.GroupMessageSave{
		Id:                    []byte(id),
		GroupId:               group,
		DecryptedMessageBytes: []byte("content of " + id),
		SentAtNs:              sentAt,
		Kind:                  mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION,
		SenderInboxId:         "sender-inbox",
		DeliveryStatus:        mb.DeliveryStatusSave_DELIVERY_STATUS_SAVE_PUBLISHED,
	}
}

// Messages returns n messages of group, sent one nanosecond apart from
// start, with ids prefix-000000, prefix-000001, ...
func Messages(prefix string, group []byte, n int, start int64) []*mb.GroupMessageSave {
	out := make([]*mb.GroupMessageSave, n)
	for i := range out {
		out[i] = Message(fmt.Sprintf("%s-%06d", prefix, i), group, start+int64(i))
	}
	return out
}

// Consent is a consent record.
func Consent(entity string, state cs.ConsentStateSave, at int64) *cs.ConsentSave {
	return &cs.ConsentSave{
		EntityType:    cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID,
		State:         state,
		Entity:        entity,
		ConsentedAtNs: at,
	}
}
