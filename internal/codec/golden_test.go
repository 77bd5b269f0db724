package codec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
)

// Golden vectors: what the reference client writes, in
// testdata/reference-vectors.json (its "source" says where each came from;
// those the reference's bindings can encode are checked against the
// reference itself on every run, interop TestCodecVectorsAreTheReferences).

// vector is the named vector's bytes.
func vector(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/reference-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors map[string]struct {
			Hex string `json:"hex"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	v, ok := file.Vectors[name]
	if !ok {
		t.Fatalf("no vector %q in testdata/reference-vectors.json", name)
	}
	return unhex(t, v.Hex)
}

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
		bytes []byte
		typ   TypeID
		value any
	}{
		{"text Hello, World!", vector(t, "text Hello, World!"), TypeText, "Hello, World!"},
		{"text hello", vector(t, "text hello"), TypeText, "hello"},
		{"read receipt", vector(t, "read receipt"), TypeReadReceipt, &ReadReceipt{}},
		{"reaction 2.0 added", vector(t, "reaction 2.0 added"), TypeReaction,
			&ct.ReactionV2{Reference: "abc", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "👍", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE}},
		{"delete message", vector(t, "delete message"), TypeDeleteMessage,
			&ct.DeleteMessage{MessageId: "0123456789abcdef"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.bytes
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
	if want := vector(t, "reaction 2.0 removed shortcode: content"); !bytes.Equal(ec.GetContent(), want) {
		t.Errorf("content %x, want %x", ec.GetContent(), want)
	}
	if got, want := ec.GetFallback(), `Removed ":thumbsup:" from an earlier message`; got != want {
		t.Errorf("fallback %q, want %q", got, want)
	}
}

func TestGoldenLegacyReaction(t *testing.T) {
	d, _, err := NewRegistry().Decode(vector(t, "legacy reaction 1.0"), DecodeOptions{})
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
	ref := vector(t, "reply")
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
	d, _, err := NewRegistry().Decode(vector(t, "group updated"), DecodeOptions{})
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
	assertJSONEqual(t, ec.GetContent(), vector(t, "intent: content"))
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
	got, err := Decompress(vector(t, "zlib of 55 bytes of 0x2a"), mc.Compression_COMPRESSION_DEFLATE, MaxDecompressedSize)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("decompress: %x, %v", got, err)
	}
}

func TestGoldenRemoteAttachmentCrypto(t *testing.T) {
	secret := bytes.Repeat([]byte{1}, 32)
	salt := bytes.Repeat([]byte{2}, 32)
	nonce := bytes.Repeat([]byte{3}, 12)
	att := &Attachment{Filename: ptr("hello.txt"), MimeType: "text/plain", Data: []byte("Hello, XMTP!")}

	ec, err := AttachmentCodec{}.Encode(att)
	if err != nil {
		t.Fatal(err)
	}
	ec.Fallback = nil
	if got, want := mustMarshal(t, ec), vector(t, "remote attachment crypto: plaintext"); !bytes.Equal(got, want) {
		t.Errorf("plaintext\n got %x\nwant %x", got, want)
	}
	key, err := attachmentKey(secret, salt)
	if err != nil || !bytes.Equal(key, vector(t, "remote attachment crypto: HKDF key")) {
		t.Errorf("HKDF key %x, %v", key, err)
	}
	payload, ra, err := encryptAttachmentWith(secret, salt, nonce, att)
	if err != nil {
		t.Fatal(err)
	}
	wantPayload := vector(t, "remote attachment crypto: payload")
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
