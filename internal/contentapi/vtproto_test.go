package contentapi

import (
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// The server marshals its responses with the code protoc-gen-go-vtproto
// generated (internal/server's codec), not protobuf's reflection. These
// hold that code to proto.Marshal for every decode outcome a response can
// carry: the same size, and bytes that parse back to the same message
// (not the same bytes: google.protobuf.Struct holds a map, which neither
// marshals in a fixed order).

type vtMarshaler interface {
	SizeVT() int
	MarshalVT() ([]byte, error)
}

func checkVTMatchesProto(t *testing.T, m interface {
	proto.Message
	vtMarshaler
}) {
	t.Helper()
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("proto.Marshal: %v", err)
	}
	got, err := m.MarshalVT()
	if err != nil {
		t.Fatalf("MarshalVT: %v", err)
	}
	if m.SizeVT() != len(want) || len(got) != len(want) {
		t.Fatalf("SizeVT %d, MarshalVT %d bytes, proto.Marshal %d bytes", m.SizeVT(), len(got), len(want))
	}
	back := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(got, back); err != nil {
		t.Fatalf("MarshalVT's bytes do not parse: %v", err)
	}
	if !proto.Equal(back, m) {
		t.Fatalf("MarshalVT's bytes parse to a different message")
	}
}

// page is a ListMessagesResponse of one message holding envelope b and
// its decode outcome, as ListMessages builds it.
func page(reg *codec.Registry, b []byte) *cb.ListMessagesResponse {
	seq := int64(7)
	msg := &mb.GroupMessageSave{Id: []byte("id"), GroupId: []byte("g"), DecryptedMessageBytes: b, SentAtNs: 1,
		SenderInboxId: "inbox", ContentType: "text", SequenceId: &seq}
	return &cb.ListMessagesResponse{
		Messages:      []*cb.StoredMessage{{Message: msg, Decoded: outcomeOf(reg, b)}},
		NextPageToken: "token",
	}
}

func TestMarshalVTMatchesProto(t *testing.T) {
	reg := codec.NewRegistry()
	for _, b := range encodedContents(t, reg) {
		checkVTMatchesProto(t, page(reg, b))
		var ec mc.EncodedContent
		if proto.Unmarshal(b, &ec) == nil {
			checkVTMatchesProto(t, &cb.EncodeResponse{EncodedContent: b, Envelope: &ec, ContentType: "t"})
		}
	}
}

func FuzzMarshalVTMatchesProto(f *testing.F) {
	reg := codec.NewRegistry(codec.WithMaxDecompressedSize(1 << 20))
	for _, b := range encodedContents(f, reg) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkVTMatchesProto(t, page(reg, b))
		// The bytes as a whole page, when they are one, with its
		// unknown fields.
		var resp cb.ListMessagesResponse
		if proto.Unmarshal(b, &resp) == nil {
			checkVTMatchesProto(t, &resp)
		}
	})
}
