package codec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// Golden vectors from REFERENCE.md: what the reference client writes.

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex in test: %v", err)
	}
	return b
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := deterministic.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenEnvelopes checks envelopes with at most one parameter byte for
// byte, both directions: our encoding equals the reference's bytes, and the
// reference's bytes decode to the value.
func TestGoldenEnvelopes(t *testing.T) {
	reg := NewRegistry()
	tests := []struct {
		name  string
		hex   string
		typ   TypeID
		value any
	}{
		{"text Hello, World!", "0a120a08786d74702e6f7267120474657874180112110a08656e636f64696e6712055554462d38220d48656c6c6f2c20576f726c6421", TypeText, "Hello, World!"},
		{"text hello", "0a120a08786d74702e6f7267120474657874180112110a08656e636f64696e6712055554462d38220568656c6c6f", TypeText, "hello"},
		{"read receipt", "0a190a08786d74702e6f7267120b72656164526563656970741801", TypeReadReceipt, &ReadReceipt{}},
		{"reaction 2.0 added", "0a160a08786d74702e6f726712087265616374696f6e18021a295265616374656420776974682022f09f918d2220746f20616e206561726c696572206d657373616765220f0a0361626318012204f09f918d2801", TypeReaction,
			&ct.ReactionV2{Reference: "abc", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "👍", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE}},
		{"delete message", "0a1b0a08786d74702e6f7267120d64656c6574654d657373616765180122120a1030313233343536373839616263646566", TypeDeleteMessage,
			&ct.DeleteMessage{MessageId: "0123456789abcdef"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.hex)
			ec, err := reg.Encode(tt.typ, tt.value)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if got := mustMarshal(t, ec); !bytes.Equal(got, want) {
				t.Errorf("encode bytes\n got %x\nwant %x", got, want)
			}
			d, _, err := reg.Decode(want, DecodeOptions{})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			assertValueEqual(t, d.Value, tt.value)
		})
	}
}

func assertValueEqual(t *testing.T, got, want any) {
	t.Helper()
	if d := valueDiff(got, want); d != "" {
		t.Errorf("value (-got +want):\n%s", d)
	}
}

// valueDiff compares two codec values: protobuf messages by proto.Equal's
// rules, wherever they sit, and an empty slice or map as a nil one (the
// wire cannot tell them apart).
func valueDiff(got, want any) string {
	return cmp.Diff(got, want, protocmp.Transform(), cmpopts.EquateEmpty())
}

func TestGoldenReactionRemovedShortcode(t *testing.T) {
	r := &ct.ReactionV2{Reference: "abc", ReferenceInboxId: "inbox1", Action: ct.ReactionAction_REACTION_ACTION_REMOVED, Content: ":thumbsup:", Schema: ct.ReactionSchema_REACTION_SCHEMA_SHORTCODE}
	ec, err := ReactionCodec{}.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, "0a036162631206696e626f78311802220a3a7468756d627375703a2802"); !bytes.Equal(ec.GetContent(), want) {
		t.Errorf("content %x, want %x", ec.GetContent(), want)
	}
	if got, want := ec.GetFallback(), `Removed ":thumbsup:" from an earlier message`; got != want {
		t.Errorf("fallback %q, want %q", got, want)
	}
}

func TestGoldenLegacyReaction(t *testing.T) {
	d, _, err := NewRegistry().Decode(unhex(t, "0a160a08786d74702e6f726712087265616374696f6e180122537b22616374696f6e223a226164646564222c227265666572656e6365223a226d6573736167652d69642d313233222c22736368656d61223a22756e69636f6465222c22636f6e74656e74223a22f09f918d227d"), DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &ct.ReactionV2{Reference: "message-id-123", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "👍", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE}
	assertValueEqual(t, d.Value, want)
	if d.Type != TypeLegacyReaction {
		t.Errorf("type %v", d.Type)
	}
}

// TestGoldenReply compares the two-parameter reply as values: the reference
// writes its parameter map in random order.
func TestGoldenReply(t *testing.T) {
	ref := unhex(t, "0a130a08786d74702e6f726712057265706c79180112200a0b636f6e74656e74547970651211786d74702e6f72672f746578743a312e3012200a097265666572656e636512136f726967696e616c2d6d6573736167652d696422380a120a08786d74702e6f7267120474657874180112110a08656e636f64696e6712055554462d38220f546869732069732061207265706c79")
	reg := NewRegistry()
	d, _, err := reg.Decode(ref, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := d.Value.(*Reply)
	if r.Reference != "original-message-id" || r.Nested.Value != "This is a reply" || r.ReferenceInboxID != nil {
		t.Fatalf("decoded %+v", r)
	}
	nested, _ := TextCodec{}.Encode("This is a reply")
	ec, err := reg.Encode(TypeReply, &Reply{Reference: "original-message-id", Content: nested})
	if err != nil {
		t.Fatal(err)
	}
	refEC := new(mc.EncodedContent)
	if err := proto.Unmarshal(ref, refEC); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ec.GetParameters(), refEC.GetParameters()) || !bytes.Equal(ec.GetContent(), refEC.GetContent()) || !proto.Equal(ec.GetType(), refEC.GetType()) {
		t.Errorf("reply envelope differs from the reference:\n got %v\nwant %v", ec, refEC)
	}
	// The reference's vector carries no fallback; ours is the reference
	// codec's text for a text reply.
	if got, want := ec.GetFallback(), `Replied with "This is a reply" to an earlier message`; got != want {
		t.Errorf("fallback %q, want %q", got, want)
	}
	// Parameters written in sorted key order: contentType before reference,
	// as in the vector, so our bytes equal it once the fallback is dropped.
	ec.Fallback = nil
	if got := mustMarshal(t, ec); !bytes.Equal(got, ref) {
		t.Errorf("bytes without fallback\n got %x\nwant %x", got, ref)
	}
}

func TestGoldenGroupUpdated(t *testing.T) {
	d, _, err := NewRegistry().Decode(unhex(t, "0a1b0a08786d74702e6f7267120d67726f75705f757064617465641801222d0a09696e626f782d31323322200a0a67726f75705f6e616d6512084f6c64204e616d651a084e6577204e616d65"), DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &mc.GroupUpdated{InitiatedByInboxId: "inbox-123", MetadataFieldChanges: []*mc.GroupUpdated_MetadataFieldChange{{FieldName: "group_name", OldValue: ptr("Old Name"), NewValue: ptr("New Name")}}}
	assertValueEqual(t, d.Value, want)
}

func TestGoldenIntent(t *testing.T) {
	ec, err := IntentCodec{}.Encode(&Intent{ID: "a1", ActionID: "y"})
	if err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, ec.GetContent(), unhex(t, "7b226964223a226131222c22616374696f6e4964223a2279227d"))
	if got := ec.GetFallback(); got != "User selected action: y" {
		t.Errorf("fallback %q", got)
	}
}

func assertJSONEqual(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("JSON\n got %s\nwant %s", got, want)
	}
}

func TestGoldenZlib(t *testing.T) {
	want := bytes.Repeat([]byte{0x2a}, 55)
	got, err := Decompress(unhex(t, "789cd3d2220b0000fcdf0907"), mc.Compression_COMPRESSION_DEFLATE, MaxDecompressedSize)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("decompress: %x, %v", got, err)
	}
}

func TestGoldenRemoteAttachmentCrypto(t *testing.T) {
	secret := bytes.Repeat([]byte{1}, 32)
	salt := bytes.Repeat([]byte{2}, 32)
	nonce := bytes.Repeat([]byte{3}, 12)
	att := &Attachment{Filename: ptr("hello.txt"), MimeType: "text/plain", Data: []byte("Hello, XMTP!")}

	ec, _ := AttachmentCodec{}.Encode(att)
	ec.Fallback = nil
	if got, want := mustMarshal(t, ec), unhex(t, "0a180a08786d74702e6f7267120a6174746163686d656e74180112150a0866696c656e616d65120968656c6c6f2e74787412160a086d696d6554797065120a746578742f706c61696e220c48656c6c6f2c20584d545021"); !bytes.Equal(got, want) {
		t.Errorf("plaintext\n got %x\nwant %x", got, want)
	}
	key, err := attachmentKey(secret, salt)
	if err != nil || hex.EncodeToString(key) != "f13753d996ddf621689ee1baf81726ca065217bb9d98360dd0b4f546aefc5c82" {
		t.Errorf("HKDF key %x, %v", key, err)
	}
	payload, ra, err := encryptAttachmentWith(secret, salt, nonce, att)
	if err != nil {
		t.Fatal(err)
	}
	wantPayload := unhex(t, "f7c0f02e720f494cafe4950e64397a19978b55365a20f71c9e672f0f9f4ccb8e698f3d1a324417ed726dafc88758944227e7d392de9009526ee86ae98dc33864a1d55a45a005f6be11aa7da414be0aa50b756fe6fe3e90ba2b32eef718eb0a54d1600f8681c8db")
	if !bytes.Equal(payload, wantPayload) {
		t.Errorf("payload\n got %x\nwant %x", payload, wantPayload)
	}
	if ra.ContentDigest != "9351c24ce85ea9957f3144cb660706f59e15bfe7b4dbc75dcd80dd204f61d821" {
		t.Errorf("digest %s", ra.ContentDigest)
	}
	if *ra.ContentLength != 103 || *ra.Filename != "hello.txt" {
		t.Errorf("contentLength %d filename %q", *ra.ContentLength, *ra.Filename)
	}
	got, err := DecryptAttachment(wantPayload, ra)
	if err != nil {
		t.Fatal(err)
	}
	assertValueEqual(t, got, att)
}
