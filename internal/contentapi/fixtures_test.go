package contentapi

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/codec"
)

func ptr[T any](v T) *T { return &v }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func textEnvelope(t codec.TypeID, s string) *mc.EncodedContent {
	return &mc.EncodedContent{Type: t.Proto(), Parameters: map[string]string{"encoding": "UTF-8"}, Content: []byte(s)}
}

var text200 = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps "

// contents is one or more Content messages of every member a client may
// encode, with every optional field exercised somewhere: what the API
// layer is tested with, in the API's own form.
func contents() []*cb.Content {
	meta, _ := structpb.NewStruct(map[string]any{"n": 1.5, "s": "x", "nested": map[string]any{"ok": true}, "list": []any{"a", nil}})
	remote := func() *cb.RemoteAttachment {
		return &cb.RemoteAttachment{
			Url: "https://files.example.com/abc", ContentDigest: sha256Hex([]byte("payload")),
			Secret: make([]byte, 32), Salt: make([]byte, 32), Nonce: make([]byte, 12), Scheme: "https://",
			ContentLength: ptr(uint32(7)), Filename: ptr("a.png"),
		}
	}
	plainRemote := remote()
	plainRemote.Url, plainRemote.Scheme, plainRemote.ContentLength, plainRemote.Filename = "http://127.0.0.1:8080/x", "http://", nil, nil
	return []*cb.Content{
		{Value: &cb.Content_Text{Text: "Hello, World! ✓"}},
		{Value: &cb.Content_Text{Text: ""}},
		{Value: &cb.Content_Markdown{Markdown: "# Title\n\n*bold*"}},
		{Value: &cb.Content_Reaction{Reaction: &ct.ReactionV2{Reference: "ab12", ReferenceInboxId: "inbox", Action: ct.ReactionAction_REACTION_ACTION_REMOVED, Content: ":+1:", Schema: ct.ReactionSchema_REACTION_SCHEMA_SHORTCODE}}},
		{Value: &cb.Content_Reply{Reply: &cb.Reply{Reference: "ab12", ReferenceInboxId: ptr("inbox-9"),
			Nested: &cb.Reply_Content{Content: &cb.Content{Value: &cb.Content_Reply{Reply: &cb.Reply{Reference: "aa",
				Nested: &cb.Reply_Content{Content: &cb.Content{Value: &cb.Content_Markdown{Markdown: "**deep**"}}}}}}}}}},
		{Value: &cb.Content_ReadReceipt{ReadReceipt: &cb.ReadReceipt{}}},
		{Value: &cb.Content_Attachment{Attachment: &cb.Attachment{MimeType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}, Filename: ptr("a.png")}}},
		{Value: &cb.Content_Attachment{Attachment: &cb.Attachment{MimeType: "application/octet-stream"}}},
		{Value: &cb.Content_RemoteAttachment{RemoteAttachment: remote()}},
		{Value: &cb.Content_RemoteAttachment{RemoteAttachment: plainRemote}},
		{Value: &cb.Content_MultiRemoteAttachment{MultiRemoteAttachment: &ct.MultiRemoteAttachment{Attachments: []*ct.RemoteAttachmentInfo{
			{ContentDigest: sha256Hex([]byte("1")), Secret: make([]byte, 32), Nonce: make([]byte, 12), Salt: make([]byte, 32), Scheme: "https://", Url: "https://a.example/1", ContentLength: ptr(uint32(10)), Filename: ptr("one")},
			{ContentDigest: sha256Hex([]byte("2")), Secret: make([]byte, 32), Nonce: make([]byte, 12), Salt: make([]byte, 32), Scheme: "http://", Url: "http://localhost/2"},
		}}}},
		{Value: &cb.Content_TransactionReference{TransactionReference: &cb.TransactionReference{Namespace: ptr("eip155"), NetworkId: "8453", Reference: "0xabc", Metadata: &cb.TransactionMetadata{
			TransactionType: "transfer", Currency: "USDC", Amount: 100000.5, Decimals: 6, FromAddress: "0x1", ToAddress: "0x2"}}}},
		{Value: &cb.Content_TransactionReference{TransactionReference: &cb.TransactionReference{NetworkId: "1", Reference: ""}}},
		{Value: &cb.Content_WalletSendCalls{WalletSendCalls: &cb.WalletSendCalls{Version: "1.0", ChainId: "0x2105", From: "0xfrom", Capabilities: &cb.StringMap{Values: map[string]string{"paymasterService": "x"}},
			Calls: []*cb.WalletCall{
				{To: ptr("0xto"), Data: ptr("0xdata"), Value: ptr("0x0"), Gas: ptr("0x5208"), Metadata: &cb.WalletCallMetadata{Description: "Send", TransactionType: "transfer", Additional: map[string]string{"currency": "USDC"}}},
				{},
			}}}},
		{Value: &cb.Content_Actions{Actions: &cb.Actions{Id: "menu", Description: "Pick one",
			ExpiresAt: timestamppb.New(time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)),
			Actions: []*cb.Action{
				{Id: "1", Label: "Yes", ImageUrl: ptr("https://img.example/1.png"), ExpiresAt: timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC))},
				{Id: "2", Label: "No", Style: cb.ActionStyle_ACTION_STYLE_SECONDARY},
			}}}},
		{Value: &cb.Content_Intent{Intent: &cb.Intent{Id: "menu", ActionId: "1", Metadata: meta}}},
		{Value: &cb.Content_Intent{Intent: &cb.Intent{Id: "menu", ActionId: "2"}}},
		{Value: &cb.Content_LeaveRequest{LeaveRequest: &ct.LeaveRequest{AuthenticatedNote: []byte{1, 2}}}},
		{Value: &cb.Content_LeaveRequest{LeaveRequest: &ct.LeaveRequest{}}},
		{Value: &cb.Content_DeleteMessage{DeleteMessage: &ct.DeleteMessage{MessageId: "00ff"}}},
	}
}

// decodeOnly are the Content members no client encodes through the API:
// the legacy reaction (CTYPE-022), commit transcripts (GMOD-035) and the
// reserved edit (CTYPE-020). Their mapping is exercised by decode tests.
var decodeOnly = map[protoreflect.Name]bool{
	"legacy_reaction": true, "group_updated": true, "group_membership_change": true, "edit_message": true,
}

// TestContentsCoverEveryMember keeps the fixtures honest: a member added to
// Content without a fixture (or a decode-only entry) fails here.
func TestContentsCoverEveryMember(t *testing.T) {
	seen := map[protoreflect.Name]bool{}
	for _, c := range contents() {
		m := c.ProtoReflect()
		seen[m.WhichOneof(m.Descriptor().Oneofs().ByName("value")).Name()] = true
	}
	fields := (&cb.Content{}).ProtoReflect().Descriptor().Oneofs().ByName("value").Fields()
	for i := range fields.Len() {
		name := fields.Get(i).Name()
		if !seen[name] && !decodeOnly[name] {
			t.Errorf("Content.%s has no fixture in contents()", name)
		}
	}
}

// TestMembersMatchDescriptors holds the members table to the codec's types
// and to Content's oneof, one to one: a type added to one and not the
// others fails here.
func TestMembersMatchDescriptors(t *testing.T) {
	codecTypes := map[codec.Key]bool{}
	for _, c := range codec.StandardCodecs() {
		codecTypes[c.ContentType().Key()] = true
	}
	for _, m := range members {
		if !codecTypes[m.Type.Key()] {
			t.Errorf("member for %v has no codec", m.Type)
		}
		delete(codecTypes, m.Type.Key())
	}
	for k := range codecTypes {
		t.Errorf("codec type %v has no member of Content", k)
	}
	if n := (&cb.Content{}).ProtoReflect().Descriptor().Oneofs().ByName("value").Fields().Len(); n != len(members) {
		t.Errorf("Content has %d members, the table %d rows", n, len(members))
	}
}
