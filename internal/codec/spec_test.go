package codec

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/rand"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

func textEnvelope(t TypeID, s string) *mc.EncodedContent {
	return &mc.EncodedContent{Type: t.Proto(), Parameters: map[string]string{"encoding": "UTF-8"}, Content: []byte(s)}
}

func kindOf(err error) Kind {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Kind
	}
	return 0
}

func TestCTYPE001_MinorVersionIgnored(t *testing.T) {
	reg := NewRegistry()
	for _, minor := range []uint32{0, 1, 7, 4294967295} {
		typ := TypeText
		typ.Minor = minor
		d, _, err := reg.Decode(mustMarshal(t, textEnvelope(typ, "hi")), DecodeOptions{})
		if err != nil || d.Value != "hi" {
			t.Errorf("text:1.%d: %v, %v", minor, d.Value, err)
		}
		if d.Type != typ {
			t.Errorf("text:1.%d: reported type %v, want the actual identifier", minor, d.Type)
		}
	}
}

func TestCTYPE001_AuthorityTypeAndMajorMustMatch(t *testing.T) {
	reg := NewRegistry()
	for _, typ := range []TypeID{
		{"example.com", "text", 1, 0}, // another authority's text
		{"xmtp.org", "text", 2, 0},    // a later major version
		{"xmtp.org", "text", 0, 0},    // an earlier major version
		{"xmtp.org", "Text", 1, 0},    // type ids are case-sensitive
		{"coinbase.com", "reaction", 2, 0},
	} {
		_, _, err := reg.Decode(mustMarshal(t, textEnvelope(typ, "hi")), DecodeOptions{})
		if kindOf(err) != KindNoMatchingCodec {
			t.Errorf("%v: got %v, want no matching codec", typ, err)
		}
	}
}

func TestCTYPE003_UntypedEnvelopeIsMalformed(t *testing.T) {
	reg := NewRegistry()
	for name, b := range map[string][]byte{
		"not protobuf":    []byte("\xff\xff\xff"),
		"no type":         mustMarshal(t, &mc.EncodedContent{Content: []byte("hi")}),
		"empty authority": mustMarshal(t, &mc.EncodedContent{Type: &mc.ContentTypeId{TypeId: "text", VersionMajor: 1}}),
		"empty type id":   mustMarshal(t, &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "xmtp.org", VersionMajor: 1}}),
	} {
		if _, _, err := reg.Decode(b, DecodeOptions{}); kindOf(err) != KindMalformedEnvelope || !errors.Is(err, ErrMalformedEnvelope) {
			t.Errorf("%s: got %v, want malformed envelope", name, err)
		}
	}
}

func TestCTYPE011_NestedContentMustBeComplete(t *testing.T) {
	for name, nested := range map[string]*mc.EncodedContent{
		"absent":          nil,
		"no type":         {Content: []byte("x")},
		"empty authority": {Type: &mc.ContentTypeId{TypeId: "text", VersionMajor: 1}},
		"empty type id":   {Type: &mc.ContentTypeId{AuthorityId: "xmtp.org", VersionMajor: 1}},
	} {
		_, err := ReplyCodec{}.Encode(&Reply{Reference: "abc", Content: nested})
		if kindOf(err) != KindEncodeFailed {
			t.Errorf("%s: got %v, want encode failure", name, err)
		}
	}
}

func TestCTYPE014_UnnamedParametersIgnored(t *testing.T) {
	reg := NewRegistry()
	ec := textEnvelope(TypeText, "hi")
	ec.Parameters["future"] = "whatever"
	ec.Parameters["reference"] = "not a text parameter"
	if d, _, err := reg.Decode(mustMarshal(t, ec), DecodeOptions{}); err != nil || d.Value != "hi" {
		t.Errorf("text with extra parameters: %v, %v", d.Value, err)
	}
	att, _ := AttachmentCodec{}.Encode(&Attachment{MimeType: "image/png", Data: []byte{1}})
	att.Parameters["contentDigest"] = "zz"
	if _, _, err := reg.Decode(mustMarshal(t, att), DecodeOptions{}); err != nil {
		t.Errorf("attachment with extra parameters: %v", err)
	}
}

func TestCTYPE014_CatalogueIdentifiers(t *testing.T) {
	want := []string{
		"xmtp.org/text:1.0", "xmtp.org/markdown:1.0", "xmtp.org/reaction:2.0", "xmtp.org/reply:1.0",
		"xmtp.org/readReceipt:1.0", "xmtp.org/attachment:1.0", "xmtp.org/remoteStaticAttachment:1.0",
		"xmtp.org/multiRemoteStaticAttachment:1.0", "xmtp.org/transactionReference:1.0",
		"xmtp.org/walletSendCalls:1.0", "coinbase.com/actions:1.0", "coinbase.com/intent:1.0",
		"xmtp.org/group_updated:1.0", "xmtp.org/group_membership_change:1.0", "xmtp.org/leave_request:1.0",
		"xmtp.org/deleteMessage:1.0", "xmtp.org/editMessage:1.0",
	}
	entries := Entries()
	if len(entries) != len(want) {
		t.Fatalf("%d catalogue entries, want %d", len(entries), len(want))
	}
	for i, e := range entries {
		if e.Type.String() != want[i] {
			t.Errorf("entry %d: %s, want %s", i, e.Type, want[i])
		}
	}
}

func TestCTYPE015_FreshRandomAndDigest(t *testing.T) {
	att := &Attachment{MimeType: "text/plain", Data: []byte("same bytes")}
	p1, r1, err := EncryptAttachment(rand.Reader, att)
	if err != nil {
		t.Fatal(err)
	}
	p2, r2, _ := EncryptAttachment(rand.Reader, att)
	if bytes.Equal(p1, p2) || bytes.Equal(r1.Secret, r2.Secret) || bytes.Equal(r1.Salt, r2.Salt) || bytes.Equal(r1.Nonce, r2.Nonce) {
		t.Error("two encryptions share payload, secret, salt or nonce")
	}
	if len(r1.Secret) != 32 || len(r1.Salt) != 32 || len(r1.Nonce) != 12 {
		t.Errorf("sizes secret %d salt %d nonce %d", len(r1.Secret), len(r1.Salt), len(r1.Nonce))
	}
	if !isLowerHex(r1.ContentDigest, 32) {
		t.Errorf("digest %q is not lowercase hex SHA-256", r1.ContentDigest)
	}
	if int(*r1.ContentLength) != len(p1) || r1.Filename == nil || r1.Scheme != "https://" {
		t.Errorf("remote attachment parameters %v", r1)
	}
	got, err := DecryptAttachment(p1, r1)
	if err != nil || valueDiff(got, att) != "" {
		t.Fatalf("decrypt: %v, %v", got, err)
	}
}

func TestCTYPE015_DigestCheckedBeforeDecryption(t *testing.T) {
	payload, ra, _ := EncryptAttachment(rand.Reader, &Attachment{MimeType: "text/plain", Data: []byte("x")})
	tampered := append([]byte(nil), payload...)
	tampered[0] ^= 1
	got, err := DecryptAttachment(tampered, ra)
	if !errors.Is(err, ErrDigestMismatch) || got != nil {
		t.Errorf("tampered payload: %v, %v; want digest mismatch", got, err)
	}
	// A wrong key with a matching digest: the digest check passes, so the
	// failure must be authentication, with no plaintext.
	copied := *ra
	wrong := &copied
	wrong.Secret = bytes.Repeat([]byte{9}, 32)
	got, err = DecryptAttachment(payload, wrong)
	if !errors.Is(err, ErrAuthentication) || got != nil {
		t.Errorf("wrong secret: %v, %v; want authentication failure", got, err)
	}
}

func TestCTYPE015_AuthenticationFailureReturnsNoPlaintext(t *testing.T) {
	secret, salt, nonce := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 12)
	payload, ra, _ := encryptAttachmentWith(secret, salt, nonce, &Attachment{MimeType: "a/b", Data: []byte("secret")})
	payload[len(payload)-1] ^= 1 // break the tag, then make the digest agree
	ra.ContentDigest = sha256Hex(payload)
	got, err := DecryptAttachment(payload, ra)
	if !errors.Is(err, ErrAuthentication) || got != nil {
		t.Errorf("got %v, %v; want authentication failure and no plaintext", got, err)
	}
}

type pollCodec struct{}

func (pollCodec) ContentType() TypeID { return TypeID{"example.com", "poll", 1, 2} }
func (pollCodec) ShouldPush() bool    { return true }
func (pollCodec) Encode(v any) (*mc.EncodedContent, error) {
	return &mc.EncodedContent{Type: pollCodec{}.ContentType().Proto(), Content: []byte(v.(string)), Fallback: ptr("poll")}, nil
}
func (pollCodec) Decode(ec *mc.EncodedContent, _ NestedDecoder) (any, error) {
	return "poll:" + string(ec.GetContent()), nil
}

func TestCTYPE017_AppCodecs(t *testing.T) {
	reg := NewRegistry()
	if err := reg.Register(pollCodec{}); err != nil {
		t.Fatal(err)
	}
	ec, err := reg.Encode(TypeID{"example.com", "poll", 1, 0}, "q?")
	if err != nil {
		t.Fatal(err)
	}
	ec.Type.VersionMinor = 9 // a later minor from another app version
	d, _, err := reg.Decode(mustMarshal(t, ec), DecodeOptions{})
	if err != nil || d.Value != "poll:q?" {
		t.Errorf("decode: %v, %v", d.Value, err)
	}
	if err := reg.Register(pollCodec{}); err == nil {
		t.Error("registering the same identifier twice succeeded")
	}
	if err := reg.Register(TextCodec{}); err == nil {
		t.Error("replacing a catalogue codec succeeded")
	}
	// A reply carrying app content decodes through the app codec.
	outer, _ := reg.Encode(TypeReply, &Reply{Reference: "ab", Content: ec})
	d, _, err = reg.Decode(mustMarshal(t, outer), DecodeOptions{})
	if err != nil || d.Value.(*Reply).Nested.Value != "poll:q?" {
		t.Errorf("nested app content: %v", err)
	}
}

func TestCTYPE018_Deletable(t *testing.T) {
	yes := []TypeID{TypeText, TypeMarkdown, TypeReply, TypeAttachment, TypeRemoteAttachment, TypeMultiRemoteAttachment, TypeTransactionReference, TypeWalletSendCalls}
	no := []TypeID{TypeReaction, TypeReadReceipt, TypeActions, TypeIntent, TypeGroupUpdated, TypeGroupMembershipChange,
		TypeLeaveRequest, TypeDeleteMessage, TypeEditMessage, TypeLegacyReaction, {"example.com", "text", 1, 0}, {"xmtp.org", "poll", 1, 0}, {"xmtp.org", "text", 2, 0}}
	for _, typ := range yes {
		minor := typ
		minor.Minor = 3
		if !Deletable(typ) || !Deletable(minor) {
			t.Errorf("%v must be deletable", typ)
		}
	}
	for _, typ := range no {
		if Deletable(typ) {
			t.Errorf("%v must not be deletable", typ)
		}
	}
}

func TestCTYPE021_FallbackOptional(t *testing.T) {
	reg := NewRegistry()
	for _, v := range roundTripValues() {
		ec, err := reg.Encode(v.typ, v.value)
		if err != nil {
			t.Fatalf("%v: %v", v.typ, err)
		}
		ec.Fallback = nil
		if _, _, err := reg.Decode(mustMarshal(t, ec), DecodeOptions{}); err != nil {
			t.Errorf("%v without fallback: %v", v.typ, err)
		}
	}
}

func TestCTYPE023_CompressedFormats(t *testing.T) {
	data := bytes.Repeat([]byte("compress me "), 100)
	z, err := Compress(data, mc.Compression_COMPRESSION_DEFLATE)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(z)) // the standard library's zlib: RFC 1950
	if err != nil {
		t.Fatalf("DEFLATE output is not zlib: %v", err)
	}
	if got, _ := io.ReadAll(zr); !bytes.Equal(got, data) {
		t.Error("zlib round trip")
	}
	g, _ := Compress(data, mc.Compression_COMPRESSION_GZIP)
	gr, err := gzip.NewReader(bytes.NewReader(g))
	if err != nil {
		t.Fatalf("GZIP output is not gzip: %v", err)
	}
	if got, _ := io.ReadAll(gr); !bytes.Equal(got, data) {
		t.Error("gzip round trip")
	}
}

func compressedText(t *testing.T, alg mc.Compression, raw []byte) []byte {
	ec := textEnvelope(TypeText, "")
	ec.Compression = &alg
	ec.Content = raw
	return mustMarshal(t, ec)
}

func stdCompress(t *testing.T, form string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch form {
	case "zlib":
		w = zlib.NewWriter(&buf)
	case "raw":
		w, _ = flate.NewWriter(&buf, flate.BestSpeed)
	case "gzip":
		w = gzip.NewWriter(&buf)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bomb returns compressed zeros that expand to n bytes.
func bomb(t *testing.T, form string, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	if form == "gzip" {
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	} else {
		w, _ = zlib.NewWriterLevel(&buf, zlib.BestSpeed)
	}
	zeros := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, len(zeros))
		if _, err := w.Write(zeros[:k]); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCTYPE026_StandardCodecsWithoutClient(t *testing.T) {
	reg := NewRegistry()
	for _, e := range Entries() {
		c, ok := reg.Lookup(e.Type)
		if !ok {
			t.Errorf("%v: no codec", e.Type)
			continue
		}
		if c.ContentType() != e.Type {
			t.Errorf("%v: codec type %v", e.Type, c.ContentType())
		}
		_, err := c.Encode(nil)
		decodeOnly := e.Transcript || e.Reserved
		if decodeOnly && (kindOf(err) != KindEncodeFailed || !bytes.Contains([]byte(err.Error()), []byte("decode only"))) {
			t.Errorf("%v: encode must be refused as decode only, got %v", e.Type, err)
		}
	}
}

func TestCTYPE028_NestedTypeTakesPrecedence(t *testing.T) {
	reg := NewRegistry()
	outer, _ := reg.Encode(TypeReply, &Reply{Reference: "ab", Content: textEnvelope(TypeText, "I am text")})
	outer.Parameters["contentType"] = "xmtp.org/reaction:2.0"
	d, _, err := reg.Decode(mustMarshal(t, outer), DecodeOptions{})
	if err != nil || d.Value.(*Reply).Nested.Value != "I am text" {
		t.Errorf("got %v, %v; want the nested text", d.Value, err)
	}
}

func TestNestingDepthLimit(t *testing.T) {
	reg := NewRegistry()
	ec := textEnvelope(TypeText, "leaf")
	for depth := 1; depth <= DefaultMaxNestingDepth+1; depth++ {
		ec = &mc.EncodedContent{Type: TypeReply.Proto(), Parameters: map[string]string{"reference": "ab"}, Content: mustMarshal(t, ec)}
		_, _, err := reg.Decode(mustMarshal(t, ec), DecodeOptions{})
		if depth <= DefaultMaxNestingDepth && err != nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
		if depth > DefaultMaxNestingDepth && kindOf(err) != KindDecodeFailed {
			t.Fatalf("depth %d: %v, want decode failure past the limit", depth, err)
		}
	}
}

func TestCTYPE030_ActionExpiryRange(t *testing.T) {
	for _, s := range []string{"2262-04-11T23:47:16.855Z", "1677-09-21T00:12:43.145Z", "9999-01-01T00:00:00Z"} {
		_, err := ActionsCodec{}.Decode(&mc.EncodedContent{Content: []byte(`{"id":"a","description":"d","actions":[{"id":"1","label":"L"}],"expiresAt":"` + s + `"}`)}, nil)
		if kindOf(err) != KindDecodeFailed {
			t.Errorf("decode expiresAt %s: %v, want failure", s, err)
		}
		_, err = ActionsCodec{}.Decode(&mc.EncodedContent{Content: []byte(`{"id":"a","description":"d","actions":[{"id":"1","label":"L","expires_at":"` + s + `"}]}`)}, nil)
		if kindOf(err) != KindDecodeFailed {
			t.Errorf("decode action expires_at %s: %v, want failure", s, err)
		}
	}
	for _, ts := range []string{"2262-04-11T23:47:16.855Z", "1600-01-01T00:00:00Z"} {
		a := validActions()
		a.ExpiresAt = mustTimestamp(t, ts)
		if _, err := (ActionsCodec{}).Encode(a); kindOf(err) != KindEncodeFailed {
			t.Errorf("encode expiresAt %s: %v, want failure", ts, err)
		}
		a = validActions()
		a.Actions[0].ExpiresAt = mustTimestamp(t, ts)
		if _, err := (ActionsCodec{}).Encode(a); kindOf(err) != KindEncodeFailed {
			t.Errorf("encode action expiresAt %s: %v, want failure", ts, err)
		}
	}
}

func TestCTYPE031_NoCompressionUnlessAsked(t *testing.T) {
	reg := NewRegistry()
	for _, v := range roundTripValues() {
		ec, err := reg.Encode(v.typ, v.value)
		if err != nil {
			t.Fatal(err)
		}
		if ec.Compression != nil {
			t.Errorf("%v: compression set without being asked", v.typ)
		}
	}
}

// deflateBomb is a raw DEFLATE stream that expands to n MiB of zeros
// cheaply: one sync-flushed segment holding 1 MiB of zeros, repeated. (Its
// history is all zeros, so each copy decodes the same wherever it stands.)
func deflateBomb(t *testing.T, n int) []byte {
	t.Helper()
	var seg bytes.Buffer
	w, _ := flate.NewWriter(&seg, flate.BestCompression)
	if _, err := w.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat(seg.Bytes(), n)
}

func TestCTYPE003_CheckPublishable(t *testing.T) {
	reg := NewRegistry()
	bad := map[string]*mc.EncodedContent{
		"no type":         {Content: []byte("x")},
		"empty type id":   {Type: &mc.ContentTypeId{AuthorityId: "example.com"}},
		"transcript":      {Type: TypeGroupUpdated.Proto()},
		"reserved edit":   {Type: TypeEditMessage.Proto()},
		"legacy reaction": {Type: TypeLegacyReaction.Proto(), Content: []byte(`{"action":"added","reference":"r","schema":"unicode","content":"x"}`)},
		"invalid text":    {Type: TypeText.Proto(), Content: []byte{0xff}},
	}
	for name, ec := range bad {
		if err := reg.CheckPublishable(ec, nil); kindOf(err) != KindEncodeFailed {
			t.Errorf("%s: %v, want an encode failure", name, err)
		}
	}
	for name, ec := range map[string]*mc.EncodedContent{
		"custom":      {Type: (&TypeID{"example.com", "poll", 1, 0}).Proto(), Content: []byte{0xff}},
		"valid text":  textEnvelope(TypeText, "hi"),
		"no fallback": {Type: TypeReadReceipt.Proto()},
		"later minor": {Type: (&TypeID{"xmtp.org", "text", 1, 3}).Proto(), Content: []byte("hi")},
	} {
		if err := reg.CheckPublishable(ec, nil); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCTYPE024_DecompressBeforeDecoding(t *testing.T) {
	reg := NewRegistry()
	for _, tc := range []struct {
		form string
		alg  mc.Compression
	}{{"zlib", mc.Compression_COMPRESSION_DEFLATE}, {"raw", mc.Compression_COMPRESSION_DEFLATE}, {"gzip", mc.Compression_COMPRESSION_GZIP}} {
		d, _, err := reg.Decode(compressedText(t, tc.alg, stdCompress(t, tc.form, []byte("squeezed"))), DecodeOptions{})
		if err != nil || d.Value != "squeezed" {
			t.Errorf("%s: %v, %v", tc.form, d.Value, err)
		}
	}
	for name, b := range map[string][]byte{
		"unknown algorithm": compressedText(t, mc.Compression(7), []byte("squeezed")),
		"corrupt deflate":   compressedText(t, mc.Compression_COMPRESSION_DEFLATE, []byte{0xff, 0xfe, 0xfd}),
		"corrupt gzip":      compressedText(t, mc.Compression_COMPRESSION_GZIP, []byte("not gzip")),
		"truncated gzip":    compressedText(t, mc.Compression_COMPRESSION_GZIP, stdCompress(t, "gzip", []byte("squeezed"))[:15]),
		"gzip named zlib":   compressedText(t, mc.Compression_COMPRESSION_DEFLATE, stdCompress(t, "gzip", []byte("squeezed"))),
	} {
		if _, _, err := reg.Decode(b, DecodeOptions{}); kindOf(err) != KindDecodeFailed {
			t.Errorf("%s: %v, want a decode failure", name, err)
		}
	}
}

func TestCTYPE024_NestedContentDecompressed(t *testing.T) {
	reg := NewRegistry()
	alg := mc.Compression_COMPRESSION_GZIP
	nested := &mc.EncodedContent{Type: (&TypeID{"example.com", "custom", 1, 0}).Proto(), Compression: &alg, Content: stdCompress(t, "gzip", []byte("inner"))}
	outer, err := reg.Encode(TypeReply, &Reply{Reference: "ab", Content: nested})
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := reg.Decode(mustMarshal(t, outer), DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := d.Value.(*Reply); string(r.Content.GetContent()) != "inner" || r.Content.Compression != nil {
		t.Errorf("nested content not decompressed: %v", r.Content)
	}
}

func TestCTYPE025_DecompressedSizeLimit(t *testing.T) {
	reg := NewRegistry()
	for _, tc := range []struct {
		form string
		alg  mc.Compression
	}{{"zlib", mc.Compression_COMPRESSION_DEFLATE}, {"gzip", mc.Compression_COMPRESSION_GZIP}} {
		t.Run(tc.form, func(t *testing.T) {
			at := compressedText(t, tc.alg, bomb(t, tc.form, MaxDecompressedSize))
			if d, _, err := reg.Decode(at, DecodeOptions{}); err != nil || len(d.Value.(string)) != MaxDecompressedSize {
				t.Errorf("exactly 16777216 bytes must decode: %v", err)
			}
			over := compressedText(t, tc.alg, bomb(t, tc.form, MaxDecompressedSize+1))
			if _, _, err := reg.Decode(over, DecodeOptions{}); kindOf(err) != KindDecodeFailed {
				t.Errorf("16777217 bytes: %v, want a decode failure", err)
			}
		})
	}
}

// TestCTYPE025_BoundedMemory decodes a bomb 64 times the limit (a lowered
// limit keeps the test fast, also under -race) and checks that decoding
// cost memory on the order of the limit, not of the expansion.
func TestCTYPE025_BoundedMemory(t *testing.T) {
	const limit = 1 << 20
	reg := NewRegistry(WithMaxDecompressedSize(limit))
	for _, tc := range []struct {
		form string
		alg  mc.Compression
	}{{"zlib", mc.Compression_COMPRESSION_DEFLATE}, {"gzip", mc.Compression_COMPRESSION_GZIP}} {
		huge := compressedText(t, tc.alg, bomb(t, tc.form, 64*limit))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, _, err := reg.Decode(huge, DecodeOptions{})
		runtime.ReadMemStats(&after)
		if kindOf(err) != KindDecodeFailed {
			t.Errorf("%s bomb: %v", tc.form, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*limit {
			t.Errorf("%s: decoding a %d MiB bomb allocated %d KiB; memory must stay on the order of the %d KiB limit", tc.form, 64*limit>>20, alloc>>10, limit>>10)
		} else {
			t.Logf("%s: %d MiB bomb, limit %d KiB: %d KiB allocated", tc.form, 64*limit>>20, limit>>10, alloc>>10)
		}
	}
}

// TestCTYPE025_BoundedMemoryAtTheLimit decodes 1 GiB bombs, zlib and gzip
// framing around the same DEFLATE stream, against the real 16 MiB limit.
// The trailing checksums are never reached: decoding must stop at the limit.
func TestCTYPE025_BoundedMemoryAtTheLimit(t *testing.T) {
	reg := NewRegistry()
	body := deflateBomb(t, 1024)
	for _, tc := range []struct {
		form  string
		alg   mc.Compression
		frame []byte
	}{
		{"zlib", mc.Compression_COMPRESSION_DEFLATE, append([]byte{0x78, 0x9c}, body...)},
		{"raw deflate", mc.Compression_COMPRESSION_DEFLATE, body},
		{"gzip", mc.Compression_COMPRESSION_GZIP, append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, body...)},
	} {
		b := compressedText(t, tc.alg, tc.frame)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, _, err := reg.Decode(b, DecodeOptions{})
		runtime.ReadMemStats(&after)
		if kindOf(err) != KindDecodeFailed || !strings.Contains(err.Error(), "exceeds 16777216 bytes") {
			t.Errorf("%s 1 GiB bomb: %v", tc.form, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40<<20 {
			t.Errorf("%s: decoding a 1 GiB bomb allocated %d MiB; it must stay on the order of the 16 MiB limit", tc.form, alloc>>20)
		} else {
			t.Logf("%s: 1 GiB bomb (%d KiB compressed): %d MiB allocated", tc.form, len(tc.frame)>>10, alloc>>20)
		}
	}
}

// TestDescribeMatchesItsParts: Describe, the one-lookup form the decode
// outcome uses, gives String's name, Push's value (CTYPE-010) and
// Deletable's (CTYPE-018) for every catalogue type, at other minor
// versions, for the legacy reaction, a registered application codec and
// a type nothing knows.
func TestDescribeMatchesItsParts(t *testing.T) {
	reg := NewRegistry()
	if err := reg.Register(pollCodec{}); err != nil {
		t.Fatal(err)
	}
	types := []TypeID{pollCodec{}.ContentType(), TypeLegacyReaction, {Authority: "example.com", Type: "unknown", Major: 2, Minor: 7}}
	for _, e := range Entries() {
		minor := e.Type
		minor.Minor = 3
		major := e.Type
		major.Major++
		types = append(types, e.Type, minor, major)
	}
	for _, ty := range types {
		d := reg.Describe(ty)
		push, known := false, false
		if e, ok := Catalogue(ty); ok {
			push, known = e.Push, true
		} else if c, ok := reg.Lookup(ty); ok {
			push, known = c.ShouldPush(), true
		}
		if d.Name != ty.String() || d.Push != push || d.PushKnown != known || d.Deletable != Deletable(ty) {
			t.Errorf("%v: Describe %+v; String %q, push %v %v, Deletable %v", ty, d, ty.String(), push, known, Deletable(ty))
		}
	}
}
