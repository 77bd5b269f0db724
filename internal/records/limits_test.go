package records

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cs "github.com/contentbackup/contentbackup/api/xmtp/device_sync/consent_backup"
	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
)

// sizeCase is a record built to a size and the field its refusal must
// name ("" when it must be accepted).
type sizeCase struct {
	name  string
	check func(Limits) error
	want  string
}

// TestRecordSizeLimits: each size limit refuses a record one byte past it,
// naming the field, and accepts one at it; limits are small here so that
// the records are built to exact sizes (RELIABILITY.md, the limits table).
func TestRecordSizeLimits(t *testing.T) {
	l := Limits{GroupBytes: 1000, MessageContentBytes: 2000, MessageBytes: 500, ConsentBytes: 300}
	// message builds a message of content bytes of content whose other
	// fields take beside bytes (the sender pads it to the size).
	message := func(content, beside int) *mb.GroupMessageSave {
		m := &mb.GroupMessageSave{Id: []byte("id"), GroupId: []byte("g"), DecryptedMessageBytes: make([]byte, content)}
		m.SenderInboxId = strings.Repeat("s", padTo(t, m, func(n int) { m.SenderInboxId = strings.Repeat("s", n) }, content+beside))
		return m
	}
	group := func(size int) *gb.GroupSave {
		g := &gb.GroupSave{Id: make([]byte, 16)}
		g.Metadata = &gb.ImmutableMetadataSave{}
		g.Metadata.CreatorInboxId = strings.Repeat("c", padTo(t, g, func(n int) { g.Metadata.CreatorInboxId = strings.Repeat("c", n) }, size))
		return g
	}
	consent := func(size int) *cs.ConsentSave {
		c := &cs.ConsentSave{EntityType: cs.ConsentTypeSave_CONSENT_TYPE_SAVE_INBOX_ID, State: cs.ConsentStateSave_CONSENT_STATE_SAVE_ALLOWED}
		c.Entity = strings.Repeat("e", padTo(t, c, func(n int) { c.Entity = strings.Repeat("e", n) }, size))
		return c
	}
	for _, c := range []sizeCase{
		{"content at its limit", func(l Limits) error { return l.CheckMessageSize(message(2000, 100)) }, ""},
		{"content past its limit", func(l Limits) error { return l.CheckMessageSize(message(2001, 100)) }, "decrypted_message_bytes"},
		{"fields beside content at their limit", func(l Limits) error { return l.CheckMessageSize(message(2000, 500)) }, ""},
		{"fields beside content past their limit", func(l Limits) error { return l.CheckMessageSize(message(2000, 501)) }, "message"},
		// The content's room is not the sender's: a record no larger
		// than the largest content allowed, all of it in sender_inbox_id.
		{"sender_inbox_id in empty content's room", func(l Limits) error { return l.CheckMessageSize(message(0, 2000)) }, "message"},
		{"group at its limit", func(l Limits) error { return l.CheckGroupSize(group(1000)) }, ""},
		{"group past its limit", func(l Limits) error { return l.CheckGroupSize(group(1001)) }, "group"},
		{"consent at its limit", func(l Limits) error { return l.CheckConsentSize(consent(300)) }, ""},
		{"consent past its limit", func(l Limits) error { return l.CheckConsentSize(consent(301)) }, "record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.check(l)
			var fe *FieldError
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (!errors.As(err, &fe) || fe.Field != c.want):
				t.Fatalf("got %v; want a refusal naming %q", err, c.want)
			}
		})
	}
}

// TestDefaultMessageLimitBoundsEveryField: under the default limits, a
// message whose content is empty and whose sender_inbox_id is 16 MiB (the
// content's limit) is refused; the fields beside content have 64 KiB in
// all.
func TestDefaultMessageLimitBoundsEveryField(t *testing.T) {
	for _, field := range []func(*mb.GroupMessageSave, string){
		func(m *mb.GroupMessageSave, s string) { m.SenderInboxId = s },
		func(m *mb.GroupMessageSave, s string) { m.AuthorityId = s },
		func(m *mb.GroupMessageSave, s string) { m.ContentType = s },
		func(m *mb.GroupMessageSave, s string) { m.ReferenceId = []byte(s) },
	} {
		m := &mb.GroupMessageSave{Id: []byte("id"), GroupId: []byte("g")}
		field(m, strings.Repeat("x", DefaultLimits.MessageContentBytes))
		var fe *FieldError
		if err := (Limits{}).CheckMessageSize(m); !errors.As(err, &fe) || fe.Field != "message" {
			t.Errorf("a 16 MiB field beside empty content: %v; want a refusal naming message", err)
		}
		field(m, strings.Repeat("x", 60<<10))
		if err := (Limits{}).CheckMessageSize(m); err != nil {
			t.Errorf("a 60 KiB field: %v", err)
		}
	}
}

// padTo sets a record's padding field (through set) so that the record
// encodes to exactly size bytes, and returns the padding's length.
func padTo(t *testing.T, m proto.Message, set func(int), size int) int {
	t.Helper()
	for n := max(0, size-proto.Size(m)-8); n <= size; n++ {
		set(n)
		if proto.Size(m) == size {
			return n
		}
		if proto.Size(m) > size {
			break
		}
	}
	t.Fatalf("no padding makes the record %d bytes", size)
	return 0
}

// TestLimitsDefaults: an unset limit (zero, or negative) is the default
// one; a set one is kept.
func TestLimitsDefaults(t *testing.T) {
	if got := (Limits{}).WithDefaults(); got != DefaultLimits {
		t.Errorf("zero limits %+v; want the defaults %+v", got, DefaultLimits)
	}
	if got := (Limits{GroupBytes: -1, MessageContentBytes: -1, MessageBytes: -1, ConsentBytes: -1}).WithDefaults(); got != DefaultLimits {
		t.Errorf("negative limits %+v; want the defaults", got)
	}
	set := Limits{GroupBytes: 1, MessageContentBytes: 2, MessageBytes: 3, ConsentBytes: 4}
	if got := set.WithDefaults(); got != set {
		t.Errorf("set limits %+v became %+v", set, got)
	}
}
