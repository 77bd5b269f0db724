package records

//lint:file-ignore SA1019 ARCH-008 is tested against the retired content_type_save field too.

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
)

func envelope(t *testing.T, typ *mc.ContentTypeId) []byte {
	t.Helper()
	b, err := proto.Marshal(&mc.EncodedContent{Type: typ, Content: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestARCH008_DeriveIdentifiers(t *testing.T) {
	typed := &mb.GroupMessageSave{
		DecryptedMessageBytes: envelope(t, &mc.ContentTypeId{AuthorityId: "xmtp.org", TypeId: "reaction", VersionMajor: 2, VersionMinor: 3}),
		AuthorityId:           "wrong", ContentType: "text", VersionMajor: 1, VersionMinor: 0,
		ContentTypeSave: mb.ContentTypeSave_CONTENT_TYPE_SAVE_TEXT,
	}
	before := proto.Clone(typed).(*mb.GroupMessageSave)
	DeriveIdentifiers(typed)
	if typed.AuthorityId != "xmtp.org" || typed.ContentType != "reaction" || typed.VersionMajor != 2 || typed.VersionMinor != 3 {
		t.Errorf("typed envelope: fields %q %q %d.%d; want the envelope's", typed.AuthorityId, typed.ContentType, typed.VersionMajor, typed.VersionMinor)
	}
	if string(typed.DecryptedMessageBytes) != string(before.DecryptedMessageBytes) || typed.ContentTypeSave != before.ContentTypeSave {
		t.Error("derivation changed the content bytes or the retired enum")
	}

	for name, content := range map[string][]byte{
		"not protobuf": []byte("\xff\xff\xff"),
		"empty":        nil,
		"untyped":      envelope(t, nil),
		"no type id":   envelope(t, &mc.ContentTypeId{AuthorityId: "xmtp.org"}),
		"no authority": envelope(t, &mc.ContentTypeId{TypeId: "text"}),
	} {
		m := &mb.GroupMessageSave{DecryptedMessageBytes: content, AuthorityId: "kept.org", ContentType: "kept", VersionMajor: 4, VersionMinor: 5}
		want := proto.Clone(m)
		DeriveIdentifiers(m)
		if !proto.Equal(m, want) {
			t.Errorf("%s: fields changed to %v; the separate fields must stay and no type be invented", name, m)
		}
	}
}

func TestCTYPE018_CheckDeletionEveryCatalogueRow(t *testing.T) {
	group := &gb.GroupSave{MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED}
	for _, e := range codec.Entries() {
		for _, minor := range []uint32{0, 9} {
			typ := e.Type
			typ.Minor = minor
			m := &mb.GroupMessageSave{Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_APPLICATION, SenderInboxId: "alice",
				DecryptedMessageBytes: envelope(t, typ.Proto())}
			DeriveIdentifiers(m)
			err := CheckDeletion(m, group, "alice")
			if e.Deletable && err != nil {
				t.Errorf("%s: %v; want deletable", typ, err)
			}
			if !e.Deletable && !errors.Is(err, ErrNotDeletable) {
				t.Errorf("%s: %v; want ErrNotDeletable", typ, err)
			}
		}
	}
	// Deletable types outside the application kind, and types outside the
	// catalogue, are refused to every sender, super admins included.
	admin := &gb.GroupSave{MutableMetadata: &gb.MutableMetadataSave{SuperAdminList: []string{"root"}}}
	for name, c := range map[string]struct {
		m   *mb.GroupMessageSave
		why string // the refusal says why the type is not deletable
	}{
		"membership change kind": {&mb.GroupMessageSave{Kind: mb.GroupMessageKindSave_GROUP_MESSAGE_KIND_SAVE_MEMBERSHIP_CHANGE, AuthorityId: "xmtp.org", ContentType: "text", VersionMajor: 1}, "not an application message"},
		"unspecified kind":       {&mb.GroupMessageSave{AuthorityId: "xmtp.org", ContentType: "text", VersionMajor: 1}, "not an application message"},
		"custom":                 {&mb.GroupMessageSave{Kind: 1, AuthorityId: "example.com", ContentType: "text", VersionMajor: 1}, "(not in the catalogue)"},
		"unknown":                {&mb.GroupMessageSave{Kind: 1}, "unknown (the content is not a typed envelope)"},
		"authority only":         {&mb.GroupMessageSave{Kind: 1, AuthorityId: "xmtp.org"}, "(not in the catalogue)"},
		"type only":              {&mb.GroupMessageSave{Kind: 1, ContentType: "text"}, "(not in the catalogue)"},
		"other major":            {&mb.GroupMessageSave{Kind: 1, AuthorityId: "xmtp.org", ContentType: "text", VersionMajor: 2}, "(not in the catalogue)"},
		"legacy reaction":        {&mb.GroupMessageSave{Kind: 1, AuthorityId: "xmtp.org", ContentType: "reaction", VersionMajor: 1}, "(not in the catalogue)"},
	} {
		if err := CheckDeletion(c.m, admin, "root"); !errors.Is(err, ErrNotDeletable) || !strings.Contains(err.Error(), "CTYPE-018") || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v; want ErrNotDeletable citing CTYPE-018 and saying %q", name, err, c.why)
		}
	}
}

func TestPROC037_CheckDeletionAuthority(t *testing.T) {
	msg := &mb.GroupMessageSave{Kind: 1, AuthorityId: "xmtp.org", ContentType: "text", VersionMajor: 1, SenderInboxId: "alice"}
	live := &gb.GroupSave{
		MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
		MutableMetadata: &gb.MutableMetadataSave{AdminList: []string{"admin"}, SuperAdminList: []string{"super"}},
	}
	restored := proto.Clone(live).(*gb.GroupSave)
	restored.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED
	anonymous := &mb.GroupMessageSave{Kind: 1, AuthorityId: "xmtp.org", ContentType: "text", VersionMajor: 1}
	tests := []struct {
		name  string
		msg   *mb.GroupMessageSave
		group *gb.GroupSave
		actor string
		ok    bool
	}{
		{"sender", msg, live, "alice", true},
		{"super admin", msg, live, "super", true},
		{"admin", msg, live, "admin", false},
		{"stranger", msg, live, "mallory", false},
		{"sender of a restored group", msg, restored, "alice", true},
		{"archived super admin of a restored group", msg, restored, "super", false},
		{"empty actor matches an unknown sender", anonymous, live, "", false},
	}
	for _, tc := range tests {
		err := CheckDeletion(tc.msg, tc.group, tc.actor)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrNotAuthorized)) {
			t.Errorf("%s: %v; want allowed %v", tc.name, err, tc.ok)
		}
	}
}

func TestCheckRecordsNameTheField(t *testing.T) {
	g := &gb.GroupSave{Id: []byte("0123456789abcdef"), MembershipState: 1, ConversationType: 1}
	if err := CheckGroup(g); err != nil {
		t.Fatalf("valid group: %v", err)
	}
	for want, mutate := range map[string]func(*gb.GroupSave){
		"group.id: required":                              func(g *gb.GroupSave) { g.Id = nil },
		"group.id: 15 bytes; a group id is 16":            func(g *gb.GroupSave) { g.Id = g.Id[:15] },
		"group.id: 17 bytes; a group id is 16":            func(g *gb.GroupSave) { g.Id = append(g.Id, 'x') },
		"group.conversation_type: required":               func(g *gb.GroupSave) { g.ConversationType = 0 },
		"group.dm_id: contains a NUL":                     func(g *gb.GroupSave) { g.DmId = proto.String("a\x00") },
		"group.metadata.creator_inbox_id: contains a NUL": func(g *gb.GroupSave) { g.Metadata = &gb.ImmutableMetadataSave{CreatorInboxId: "\x00"} },
		"group.mutable_metadata.super_admin_list[1]": func(g *gb.GroupSave) {
			g.MutableMetadata = &gb.MutableMetadataSave{SuperAdminList: []string{"ok", "\x00"}}
		},
	} {
		bad := proto.Clone(g).(*gb.GroupSave)
		mutate(bad)
		var fe *FieldError
		if err := CheckGroup(bad); !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("got %v; want a FieldError starting %q", err, want)
		}
	}
	// An archived group keeps an unspecified or Restored membership state
	// as it is (the reference accepts both); an unspecified conversation
	// type the reference refuses, and so do we.
	archived := &gb.GroupSave{Id: []byte("0123456789abcdef"), MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED, ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM,
		DmId: proto.String("dm:" + strings.Repeat("a", 64) + ":" + strings.Repeat("b", 64))}
	if err := CheckArchivedGroup(archived); err != nil {
		t.Errorf("archived group: %v", err)
	}
	archived.MembershipState = gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_UNSPECIFIED
	if err := CheckArchivedGroup(archived); err != nil {
		t.Errorf("archived group of unspecified membership: %v", err)
	}
	// A membership state the enum does not define: the reference's import
	// takes it, and so do both our paths.
	archived.MembershipState = 42
	if err := CheckArchivedGroup(archived); err != nil {
		t.Errorf("archived group of membership state 42: %v", err)
	}
	live := proto.Clone(g).(*gb.GroupSave)
	live.MembershipState = 42
	if err := CheckGroup(live); err != nil {
		t.Errorf("group of membership state 42: %v", err)
	}
	archived.ConversationType = gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_UNSPECIFIED
	if err := CheckArchivedGroup(archived); err == nil || !strings.HasPrefix(err.Error(), "conversation_type: required") {
		t.Errorf("archived group of unspecified conversation type: %v", err)
	}
	for _, owner := range []string{"", " a", "a\tb", strings.Repeat("x", MaxOwnerBytes+1), "\xff"} {
		if CheckOwner(owner) == nil {
			t.Errorf("owner %q accepted", owner)
		}
	}
	if err := CheckOwner("0123abcd-inbox"); err != nil {
		t.Errorf("valid owner: %v", err)
	}
}

// TestReferenceImportRules: the shapes the reference client's import
// refuses or panics on are refused by the one check both the write path
// and import use, naming the field (interop/refrules_test.go holds each
// against the reference itself).
func TestReferenceImportRules(t *testing.T) {
	a64, b64 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	dm := func(id *string) *gb.GroupSave {
		return &gb.GroupSave{Id: []byte("0123456789abcdef"), MembershipState: gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_ALLOWED,
			ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_DM, DmId: id}
	}
	for name, c := range map[string]struct {
		g     *gb.GroupSave
		field string
	}{
		"no dm_id":       {dm(nil), "dm_id"},
		"empty":          {dm(proto.String("")), "dm_id"},
		"67 bytes":       {dm(proto.String("dm:" + a64)), "dm_id"},
		"across byte 3":  {dm(proto.String("dm\u00e9" + a64 + ":" + b64)), "dm_id"},
		"across byte 67": {dm(proto.String("dm:" + a64[:63] + "\u00e9:" + b64)), "dm_id"},
		"across byte 68": {dm(proto.String("dm:" + a64 + "\u00e9" + b64)), "dm_id"},
		"68 bytes":       {dm(proto.String("dm:" + a64 + ":")), ""},
		"canonical":      {dm(proto.String("dm:" + a64 + ":" + b64)), ""},
		"lone from":      {&gb.GroupSave{Id: []byte("0123456789abcdef"), ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP, MessageDisappearFromNs: proto.Int64(1)}, "message_disappear"},
		"lone in":        {&gb.GroupSave{Id: []byte("0123456789abcdef"), ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP, MessageDisappearInNs: proto.Int64(1)}, "message_disappear"},
		"pair":           {&gb.GroupSave{Id: []byte("0123456789abcdef"), ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP, MessageDisappearFromNs: proto.Int64(1), MessageDisappearInNs: proto.Int64(2)}, ""},
		"group no dm_id": {&gb.GroupSave{Id: []byte("0123456789abcdef"), ConversationType: gb.ConversationTypeSave_CONVERSATION_TYPE_SAVE_GROUP}, ""},
	} {
		err := CheckArchivedGroup(c.g)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v, want accepted", name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.field) {
			t.Errorf("%s: %v, want a FieldError on %s", name, err, c.field)
		}
	}
	//lint:ignore SA1019 the deprecated value is the shape under test
	address := &cs.ConsentSave{EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_ADDRESS, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED, Entity: "0x1"}
	var fe *FieldError
	if err := CheckConsent(address); !errors.As(err, &fe) || fe.Field != "entity_type" {
		t.Errorf("consent of type ADDRESS: %v, want refused on entity_type", err)
	}
}
