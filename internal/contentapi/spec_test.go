package contentapi

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// TestCTYPE008_UndecodableContentIsKept checks that the outcome of every
// failure kind carries the original bytes, the actual identifier and the
// fallback, and never a text or fallback type in their place.
func TestCTYPE008_UndecodableContentIsKept(t *testing.T) {
	reg := codec.NewRegistry()
	custom := &mc.EncodedContent{Type: (&codec.TypeID{Authority: "example.com", Type: "poll", Major: 3, Minor: 1}).Proto(), Fallback: ptr("A poll"), Content: []byte("plain UTF-8 that is not text")}
	badText := textEnvelope(codec.TypeText, "x")
	badText.Parameters["encoding"] = "latin-1"
	badText.Fallback = ptr("fb")
	for name, tc := range map[string]struct {
		b    []byte
		kind cb.UndecodedKind
		typ  string
	}{
		"custom type":    {mustMarshal(t, custom), cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC, "example.com/poll:3.1"},
		"decode failure": {mustMarshal(t, badText), cb.UndecodedKind_UNDECODED_KIND_DECODE_FAILED, "xmtp.org/text:1.0"},
		"not envelope":   {[]byte("\x0a\x05hello world"), cb.UndecodedKind_UNDECODED_KIND_MALFORMED_ENVELOPE, ""},
	} {
		resp := outcomeOf(reg, tc.b)
		u := resp.GetUndecoded()
		if u == nil {
			t.Fatalf("%s: decoded as %v, want undecoded", name, resp.GetContent())
		}
		if !bytes.Equal(u.GetEncodedContent(), tc.b) {
			t.Errorf("%s: bytes not kept", name)
		}
		if u.GetKind() != tc.kind {
			t.Errorf("%s: kind %v, want %v", name, u.GetKind(), tc.kind)
		}
		if resp.GetContentType() != tc.typ {
			t.Errorf("%s: content type %q, want %q", name, resp.GetContentType(), tc.typ)
		}
		if tc.typ != "" && codec.TypeIDOf(u.GetType()).String() != tc.typ {
			t.Errorf("%s: undecoded type %v", name, u.GetType())
		}
	}
	u := outcomeOf(reg, mustMarshal(t, custom)).GetUndecoded()
	if u.GetFallback() != "A poll" || !bytes.Equal(u.GetEnvelope().GetContent(), custom.Content) {
		t.Errorf("custom fallback or envelope lost: %v", u)
	}
}

func TestCTYPE009_FailuresAreDistinguishable(t *testing.T) {
	reg := codec.NewRegistry()
	_, _, noCodec := reg.Decode(mustMarshal(t, textEnvelope(codec.TypeID{Authority: "example.com", Type: "x", Major: 1, Minor: 0}, "looks like text")), codec.DecodeOptions{})
	_, _, decodeFailed := reg.Decode(mustMarshal(t, &mc.EncodedContent{Type: codec.TypeReaction.Proto(), Content: []byte{0xff}}), codec.DecodeOptions{})
	_, _, malformed := reg.Decode([]byte{0x0a, 0xff}, codec.DecodeOptions{})
	_, encodeFailed := reg.Encode(codec.TypeReaction, &ct.ReactionV2{})
	for _, tc := range []struct {
		err  error
		want error
	}{{noCodec, codec.ErrNoMatchingCodec}, {decodeFailed, codec.ErrDecodeFailed}, {malformed, codec.ErrMalformedEnvelope}, {encodeFailed, codec.ErrEncodeFailed}} {
		for _, other := range []error{codec.ErrNoMatchingCodec, codec.ErrDecodeFailed, codec.ErrMalformedEnvelope, codec.ErrEncodeFailed} {
			if got := errors.Is(tc.err, other); got != (other == tc.want) {
				t.Errorf("errors.Is(%v, %v) = %v", tc.err, other, got)
			}
		}
	}
	// A lookup failure is never a text decode.
	if resp := outcomeOf(reg, mustMarshal(t, textEnvelope(codec.TypeID{Authority: "example.com", Type: "x", Major: 1, Minor: 0}, "looks like text"))); resp.GetContent() != nil {
		t.Errorf("unknown UTF-8 content decoded as %v", resp.GetContent())
	}
}

func TestCTYPE010_PushValues(t *testing.T) {
	want := map[codec.TypeID]bool{
		codec.TypeText: true, codec.TypeMarkdown: true, codec.TypeReaction: false, codec.TypeReply: true, codec.TypeReadReceipt: false,
		codec.TypeAttachment: true, codec.TypeRemoteAttachment: true, codec.TypeMultiRemoteAttachment: true,
		codec.TypeTransactionReference: true, codec.TypeWalletSendCalls: true, codec.TypeActions: true, codec.TypeIntent: true,
		codec.TypeGroupUpdated: false, codec.TypeGroupMembershipChange: false, codec.TypeLeaveRequest: false,
		codec.TypeDeleteMessage: false, codec.TypeEditMessage: false,
	}
	reg := codec.NewRegistry()
	for typ, push := range want {
		got, ok := reg.Push(typ)
		if !ok || got != push {
			t.Errorf("%v: push %v (%v), want %v", typ, got, ok, push)
		}
		if c, ok := reg.Lookup(typ); !ok || c.ShouldPush() != push {
			t.Errorf("%v: codec push disagrees with the catalogue", typ)
		}
	}
	if _, ok := reg.Push(codec.TypeID{Authority: "example.com", Type: "x", Major: 1, Minor: 0}); ok {
		t.Error("a type outside the catalogue has no catalogue push value")
	}
	// A raw envelope of a catalogue type gets the catalogue value.
	resp := outcomeOf(reg, mustMarshal(t, &mc.EncodedContent{Type: codec.TypeReadReceipt.Proto()}))
	if resp.ShouldPush == nil || *resp.ShouldPush {
		t.Errorf("read receipt push %v, want false", resp.ShouldPush)
	}
}

func TestCTYPE020_EditIsKeptNotApplied(t *testing.T) {
	reg := codec.NewRegistry()
	edit := &ct.EditMessage{MessageId: "ab", EditedContent: textEnvelope(codec.TypeText, "new words")}
	b := mustMarshal(t, &mc.EncodedContent{Type: codec.TypeEditMessage.Proto(), Content: mustMarshal(t, edit)})
	resp := outcomeOf(reg, b)
	if got := resp.GetContent().GetEditMessage(); !proto.Equal(got, edit) {
		t.Errorf("edit not kept as an edit: %v", resp)
	}
	if _, err := reg.Encode(codec.TypeEditMessage, edit); !errors.Is(err, codec.ErrEncodeFailed) {
		t.Errorf("encoding the reserved edit type: %v", err)
	}
}

func TestCTYPE022_ReactionsPublishedAsMajor2(t *testing.T) {
	ec, err := Encode(codec.NewRegistry(), &cb.Content{Value: &cb.Content_Reaction{Reaction: &ct.ReactionV2{Reference: "ab", Content: "x", Action: 1, Schema: 1}}})
	if err != nil || ec.GetType().GetVersionMajor() != 2 {
		t.Errorf("reaction major %d, %v", ec.GetType().GetVersionMajor(), err)
	}
	_, err = Encode(codec.NewRegistry(), &cb.Content{Value: &cb.Content_LegacyReaction{LegacyReaction: &ct.ReactionV2{Reference: "ab"}}})
	if !errors.Is(err, codec.ErrEncodeFailed) {
		t.Errorf("legacy reaction encoded: %v", err)
	}
}

func TestCTYPE027_UnknownNestedContent(t *testing.T) {
	reg := codec.NewRegistry()
	nested := &mc.EncodedContent{Type: (&codec.TypeID{Authority: "example.com", Type: "sticker", Major: 1, Minor: 0}).Proto(), Fallback: ptr("a sticker"), Content: []byte{1, 2, 3}}
	outer, _ := reg.Encode(codec.TypeReply, &codec.Reply{Reference: "0a0b", Content: nested})
	resp := outcomeOf(reg, mustMarshal(t, outer))
	r := resp.GetContent().GetReply()
	if r == nil || r.GetReference() != "0a0b" {
		t.Fatalf("reply not decoded: %v", resp)
	}
	u := r.GetUndecoded()
	if u.GetKind() != cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC || !proto.Equal(u.GetEnvelope(), nested) || !bytes.Equal(u.GetEncodedContent(), mustMarshal(t, nested)) {
		t.Errorf("nested unknown content not kept: %v", u)
	}
	if codec.TypeIDOf(u.GetType()).String() != "example.com/sticker:1.0" || u.GetFallback() != "a sticker" {
		t.Errorf("nested identifier or fallback lost: %v", u)
	}
}

func TestCTYPE029_InvalidNestedContent(t *testing.T) {
	reg := codec.NewRegistry()
	badNested := textEnvelope(codec.TypeText, "x")
	badNested.Parameters["encoding"] = "UTF-16"
	cases := map[string][]byte{
		"malformed bytes":     {0x0a, 0xff, 0x01},
		"untyped":             mustMarshal(t, &mc.EncodedContent{Content: []byte("x")}),
		"nested codec fails":  mustMarshal(t, badNested),
		"nested decompresses": mustMarshal(t, &mc.EncodedContent{Type: codec.TypeText.Proto(), Compression: mc.Compression_COMPRESSION_GZIP.Enum(), Content: []byte("nope")}),
	}
	for name, inner := range cases {
		outer := &mc.EncodedContent{Type: codec.TypeReply.Proto(), Parameters: map[string]string{"reference": "ab", "contentType": "xmtp.org/text:1.0"}, Fallback: ptr("outer fallback"), Content: inner}
		b := mustMarshal(t, outer)
		resp := outcomeOf(reg, b)
		u := resp.GetUndecoded()
		if u.GetKind() != cb.UndecodedKind_UNDECODED_KIND_DECODE_FAILED || !bytes.Equal(u.GetEncodedContent(), b) || u.GetFallback() != "outer fallback" {
			t.Errorf("%s: %v; want a decode failure keeping outer bytes and fallback", name, resp)
		}
	}
}

// TestCTYPE016_LaterMinorDecodesWithEarlierRules: content under a later
// minor version, carrying additions the earlier version does not know
// (unknown protobuf fields, unknown JSON members, unknown parameters),
// decodes with the earlier version's rules.
func TestCTYPE016_LaterMinorDecodesWithEarlierRules(t *testing.T) {
	reg := codec.NewRegistry()
	reaction := append(mustMarshal(t, &ct.ReactionV2{Reference: "ab", Action: 1, Content: "x", Schema: 1}), 0x78, 0x01) // field 15 varint 1
	cases := []struct {
		typ     codec.TypeID
		content []byte
		params  map[string]string
	}{
		{codec.TypeID{Authority: "xmtp.org", Type: "reaction", Major: 2, Minor: 3}, reaction, nil},
		{codec.TypeID{Authority: "coinbase.com", Type: "intent", Major: 1, Minor: 9}, []byte(`{"id":"i","actionId":"a","addedIn19":{"x":[1,2]}}`), nil},
		{codec.TypeID{Authority: "xmtp.org", Type: "text", Major: 1, Minor: 4}, []byte("hi"), map[string]string{"encoding": "UTF-8", "direction": "rtl"}},
		{codec.TypeID{Authority: "xmtp.org", Type: "attachment", Major: 1, Minor: 2}, []byte{1}, map[string]string{"mimeType": "a/b", "thumbnail": "x"}},
	}
	for _, tc := range cases {
		b := mustMarshal(t, &mc.EncodedContent{Type: tc.typ.Proto(), Parameters: tc.params, Content: tc.content})
		if resp := outcomeOf(reg, b); resp.GetContent() == nil {
			t.Errorf("%v: %v", tc.typ, resp.GetUndecoded())
		}
	}
}

// TestRegistryConcurrentUse decodes from many goroutines at once; under
// -race it checks that the registry and its nested decoders share no
// mutable state.
func TestRegistryConcurrentUse(t *testing.T) {
	reg := codec.NewRegistry()
	var inputs [][]byte
	for _, c := range contents() {
		ec, err := Encode(reg, c)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, mustMarshal(t, ec))
	}
	done := make(chan error)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; i < 50; i++ {
				for _, b := range inputs {
					if outcomeOf(reg, b).GetContent() == nil {
						done <- errors.New("not decoded")
						return
					}
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCTYPE027_NestedEnvelopeDecompressed: through the API, an unknown
// nested type comes back with its envelope decompressed and its original
// bytes unchanged (CTYPE-008).
func TestCTYPE027_NestedEnvelopeDecompressed(t *testing.T) {
	reg := codec.NewRegistry()
	alg := mc.Compression_COMPRESSION_GZIP
	squeezed, err := codec.Compress([]byte("inner"), alg)
	if err != nil {
		t.Fatal(err)
	}
	nested := &mc.EncodedContent{Type: (&codec.TypeID{Authority: "example.com", Type: "custom", Major: 1, Minor: 0}).Proto(), Compression: &alg, Content: squeezed}
	outer, err := reg.Encode(codec.TypeReply, &codec.Reply{Reference: "ab", Content: nested})
	if err != nil {
		t.Fatal(err)
	}
	u := outcomeOf(reg, mustMarshal(t, outer)).GetContent().GetReply().GetUndecoded()
	if string(u.GetEnvelope().GetContent()) != "inner" || !bytes.Equal(u.GetEncodedContent(), outer.GetContent()) {
		t.Errorf("nested undecoded: envelope %v, bytes %x", u.GetEnvelope(), u.GetEncodedContent())
	}
}

// outcomeOf is DecodeResponse with no budget, which always has an outcome.
func outcomeOf(reg *codec.Registry, b []byte) *cb.DecodeResponse {
	resp, err := DecodeResponse(reg, b, Options{})
	if err != nil {
		panic("an unmetered decode failed: " + err.Error())
	}
	return resp
}
