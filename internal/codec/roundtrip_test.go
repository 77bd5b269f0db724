package codec

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mustTimestamp(t *testing.T, s string) *timestamppb.Timestamp {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return timestamppb.New(tm)
}

func validActions() *Actions {
	return &Actions{ID: "menu", Description: "Pick one", Actions: []*Action{{ID: "1", Label: "Yes"}, {ID: "2", Label: "No", Style: ActionStyleDanger}}}
}

func validRemote() *RemoteAttachment {
	return &RemoteAttachment{
		URL: "https://files.example.com/abc", ContentDigest: sha256Hex([]byte("payload")),
		Secret: make([]byte, 32), Salt: make([]byte, 32), Nonce: make([]byte, 12), Scheme: "https://",
		ContentLength: ptr(uint32(7)), Filename: ptr("a.png"),
	}
}

type typedValue struct {
	typ   TypeID
	value any
}

// roundTripValues is one or more values of every catalogue type with an
// encoder, with every optional member exercised somewhere.
func roundTripValues() []typedValue {
	meta, _ := structpb.NewStruct(map[string]any{"n": 1.5, "s": "x", "nested": map[string]any{"ok": true}, "list": []any{"a", nil}})
	return []typedValue{
		{TypeText, "Hello, World! ✓"},
		{TypeText, ""},
		{TypeMarkdown, "# Title\n\n*bold*"},
		{TypeReaction, &ct.ReactionV2{Reference: "ab12", ReferenceInboxId: "inbox", Action: ct.ReactionAction_REACTION_ACTION_REMOVED, Content: ":+1:", Schema: ct.ReactionSchema_REACTION_SCHEMA_SHORTCODE}},
		{TypeReply, &Reply{Reference: "ab12", ReferenceInboxID: ptr("inbox-9"), Content: textEnvelope(TypeText, "nested")}},
		{TypeReadReceipt, &ReadReceipt{}},
		{TypeAttachment, &Attachment{MimeType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}, Filename: ptr("a.png")}},
		{TypeAttachment, &Attachment{MimeType: "application/octet-stream"}},
		{TypeRemoteAttachment, validRemote()},
		{TypeRemoteAttachment, func() *RemoteAttachment {
			r := validRemote()
			r.URL, r.Scheme, r.ContentLength, r.Filename = "http://127.0.0.1:8080/x", "http://", nil, nil
			return r
		}()},
		{TypeMultiRemoteAttachment, &ct.MultiRemoteAttachment{Attachments: []*ct.RemoteAttachmentInfo{
			{ContentDigest: sha256Hex([]byte("1")), Secret: make([]byte, 32), Nonce: make([]byte, 12), Salt: make([]byte, 32), Scheme: "https://", Url: "https://a.example/1", ContentLength: ptr(uint32(10)), Filename: ptr("one")},
			{ContentDigest: sha256Hex([]byte("2")), Secret: make([]byte, 32), Nonce: make([]byte, 12), Salt: make([]byte, 32), Scheme: "http://", Url: "http://localhost/2"},
		}}},
		{TypeTransactionReference, &TransactionReference{Namespace: ptr("eip155"), NetworkID: "8453", Reference: "0xabc", Metadata: &TransactionMetadata{
			TransactionType: "transfer", Currency: "USDC", Amount: 100000.5, Decimals: 6, FromAddress: "0x1", ToAddress: "0x2"}}},
		{TypeTransactionReference, &TransactionReference{NetworkID: "1", Reference: ""}},
		{TypeWalletSendCalls, &WalletSendCalls{Version: "1.0", ChainID: "0x2105", From: "0xfrom", Capabilities: map[string]string{"paymasterService": "x"},
			Calls: []*WalletCall{
				{To: ptr("0xto"), Data: ptr("0xdata"), Value: ptr("0x0"), Gas: ptr("0x5208"), Metadata: &WalletCallMetadata{Description: "Send", TransactionType: "transfer", Additional: map[string]string{"currency": "USDC"}}},
				{},
			}}},
		{TypeWalletSendCalls, &WalletSendCalls{Version: "1.0", ChainID: "1", From: "0xf"}},
		{TypeActions, func() *Actions {
			a := validActions()
			a.ExpiresAt = timestamppb.New(time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC))
			a.Actions[0].ImageURL = ptr("https://img.example/1.png")
			a.Actions[0].ExpiresAt = timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC))
			a.Actions[1].Style = ActionStyleSecondary
			return a
		}()},
		{TypeIntent, &Intent{ID: "menu", ActionID: "1", Metadata: meta}},
		{TypeIntent, &Intent{ID: "menu", ActionID: "2"}},
		{TypeLeaveRequest, &ct.LeaveRequest{AuthenticatedNote: []byte{1, 2}}},
		{TypeLeaveRequest, &ct.LeaveRequest{}},
		{TypeDeleteMessage, &ct.DeleteMessage{MessageId: "00ff"}},
	}
}

// TestCTYPE007_RoundTrip encodes a value of every catalogue type with an
// encoder, checks the envelope's type is the codec's, and decodes it back to
// an equal value.
func TestCTYPE007_RoundTrip(t *testing.T) {
	reg := NewRegistry()
	for _, v := range roundTripValues() {
		t.Run(v.typ.String(), func(t *testing.T) {
			ec, err := reg.Encode(v.typ, v.value)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if TypeIDOf(ec.GetType()) != v.typ {
				t.Errorf("envelope type %v, want %v", TypeIDOf(ec.GetType()), v.typ)
			}
			d, _, err := reg.Decode(mustMarshal(t, ec), DecodeOptions{})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if r, ok := v.value.(*Reply); ok {
				got := d.Value.(*Reply)
				if got.Reference != r.Reference || *got.ReferenceInboxID != *r.ReferenceInboxID || !proto.Equal(got.Content, r.Content) || got.Nested.Value != "nested" {
					t.Errorf("reply %+v", got)
				}
				return
			}
			assertValueEqual(t, d.Value, v.value)
		})
	}
}

// TestCTYPE007_ActionTimestampEquality: expiry compares after conversion to
// UTC and truncation below millisecond precision.
func TestCTYPE007_ActionTimestampEquality(t *testing.T) {
	a := validActions()
	loc := time.FixedZone("x", 5*3600)
	a.ExpiresAt = timestamppb.New(time.Date(2030, 5, 6, 7, 8, 9, 123456789, loc))
	ec, err := ActionsCodec{}.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, ec.GetContent(), []byte(`{"id":"menu","description":"Pick one","actions":[{"id":"1","label":"Yes"},{"id":"2","label":"No","style":"danger"}],"expiresAt":"2030-05-06T02:08:09.123Z"}`))
	got, err := ActionsCodec{}.Decode(ec, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := a.ExpiresAt.AsTime().UTC().Truncate(time.Millisecond)
	if !got.(*Actions).ExpiresAt.AsTime().Equal(want) {
		t.Errorf("expiry %v, want %v", got.(*Actions).ExpiresAt.AsTime(), want)
	}
}
