package server

import (
	"bytes"
	"compress/zlib"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/preview"
)

func envelopeBytes(t *testing.T, typ codec.TypeID, v any) []byte {
	t.Helper()
	ec, err := codec.NewRegistry().Encode(typ, v)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := proto.Marshal(ec)
	return b
}

// TestE2EPreview: Preview over TCP, and the preview option of Decode and
// DecodeBatch, with the server's words (an operator's file replacing
// one entry), the caller's locale and budget; an undecodable envelope
// previews as its fallback.
func TestE2EPreview(t *testing.T) {
	words, err := preview.Load([]byte(`locales: {en: {attachment: {title: "File", body: "📎 {{.Name}}"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := cb.NewContentServiceClient(startTCP(t, Config{PreviewWords: words}))
	ctx := t.Context()
	text := envelopeBytes(t, codec.TypeText, strings.Repeat("word ", 100))
	nested, _ := codec.NewRegistry().Encode(codec.TypeText, "see you at 8")
	reply := envelopeBytes(t, codec.TypeReply, &codec.Reply{Reference: "ab", Content: nested})
	att := envelopeBytes(t, codec.TypeAttachment, &codec.Attachment{MimeType: "image/png", Filename: proto.String("cat.png"), Data: []byte{1}})
	unknown, _ := proto.Marshal(&mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 1}, Fallback: proto.String("A poll")})

	resp, err := c.Preview(ctx, &cb.PreviewRequest{EncodedContent: reply, Options: &cb.PreviewOptions{Locale: "es-ES"}})
	if err != nil || !resp.GetPreview().GetPush() || resp.GetPreview().GetBody() != "Respondió: see you at 8" || resp.GetContentType() != "xmtp.org/reply:1.0" {
		t.Fatalf("Preview of a reply: %v, %v", resp, err)
	}
	resp, err = c.Preview(ctx, &cb.PreviewRequest{EncodedContent: text, Options: &cb.PreviewOptions{MaxBodyBytes: 40}})
	if err != nil || !resp.GetPreview().GetTruncated() || len(resp.GetPreview().GetBody()) > 40 || !strings.HasSuffix(resp.GetPreview().GetBody(), "…") {
		t.Fatalf("Preview over budget: %v, %v", resp, err)
	}
	resp, err = c.Preview(ctx, &cb.PreviewRequest{EncodedContent: unknown})
	if err != nil || !resp.GetPreview().GetFromFallback() || resp.GetPreview().GetBody() != "A poll" {
		t.Fatalf("Preview of an unknown type: %v, %v", resp, err)
	}
	d, err := c.Decode(ctx, &cb.DecodeRequest{EncodedContent: att, Preview: &cb.PreviewOptions{}})
	if err != nil || d.GetContent().GetAttachment() == nil || d.GetPreview().GetTitle() != "File" || d.GetPreview().GetBody() != "📎 cat.png" {
		t.Fatalf("Decode with a preview, words from the operator's file: %v, %v", d, err)
	}
	if d, _ := c.Decode(ctx, &cb.DecodeRequest{EncodedContent: att}); d.GetPreview() != nil {
		t.Errorf("Decode without the option carries a preview: %v", d.GetPreview())
	}
	batch, err := c.DecodeBatch(ctx, &cb.DecodeBatchRequest{EncodedContents: [][]byte{text, reply, unknown, {0xff}}, Preview: &cb.PreviewOptions{}})
	if err != nil || len(batch.GetResults()) != 4 {
		t.Fatalf("DecodeBatch with previews: %v", err)
	}
	for i, want := range []bool{true, true, true, false} {
		if p := batch.GetResults()[i].GetPreview(); p == nil || p.GetPush() != want {
			t.Errorf("batch result %d: preview %v, want push %v", i, p, want)
		}
	}
}

// TestE2EPreviewBomb: a preview is charged to the call's budget like the
// decode it rides on: a decompression bomb is RESOURCE_EXHAUSTED.
func TestE2EPreviewBomb(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{Limits: Limits{CallExpandBytes: 1 << 20}}))
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 8<<20))
	zw.Close()
	deflate := mc.Compression_COMPRESSION_DEFLATE
	bomb, _ := proto.Marshal(&mc.EncodedContent{Type: codec.TypeText.Proto(), Content: z.Bytes(), Compression: &deflate})
	_, err := c.Preview(t.Context(), &cb.PreviewRequest{EncodedContent: bomb})
	wantCode(t, err, codes.ResourceExhausted, "encoded_content")
}

// TestE2EPreviewLocaleRefused: a locale that is not a short language tag
// is INVALID_ARGUMENT naming it, before any decoding: a batch cannot make
// the server lowercase a huge string once per message.
func TestE2EPreviewLocaleRefused(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{}))
	text := envelopeBytes(t, codec.TypeText, "hi")
	batch := make([][]byte, 1000)
	for i := range batch {
		batch[i] = text
	}
	_, err := c.DecodeBatch(t.Context(), &cb.DecodeBatchRequest{EncodedContents: batch, Preview: &cb.PreviewOptions{Locale: strings.Repeat("x", 1<<20)}})
	wantCode(t, err, codes.InvalidArgument, "preview.locale")
	_, err = c.Preview(t.Context(), &cb.PreviewRequest{EncodedContent: text, Options: &cb.PreviewOptions{Locale: "en\n<script>"}})
	wantCode(t, err, codes.InvalidArgument, "preview.locale")
	if resp, err := c.Preview(t.Context(), &cb.PreviewRequest{EncodedContent: text, Options: &cb.PreviewOptions{Locale: "pt_BR"}}); err != nil || resp.GetPreview().GetBody() != "hi" {
		t.Errorf("a good locale: %v, %v", resp, err)
	}
}

// TestE2EPreviewOfNestedMegabytes: previews of replies nested to the limit
// around a megabyte of text each (two: what the decode budget lets one
// call hold), over TCP: each preview within its budget and marked cut,
// and what the previews add to the call's allocations (client and server,
// one process) is a few budgets, not a copy of the megabyte per level per
// message (over 30 MB before previews cut their fields first), which the
// decode budget does not see.
func TestE2EPreviewOfNestedMegabytes(t *testing.T) {
	c := cb.NewContentServiceClient(startTCP(t, Config{}))
	reg := codec.NewRegistry()
	nested, err := reg.Encode(codec.TypeText, strings.Repeat("megabyte ", 1<<20/9))
	if err != nil {
		t.Fatal(err)
	}
	for range reg.MaxNestingDepth() {
		if nested, err = reg.Encode(codec.TypeReply, &codec.Reply{Reference: "ab", Content: nested}); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := proto.Marshal(nested)
	call := func(p *cb.PreviewOptions) (*cb.DecodeBatchResponse, uint64) {
		var resp *cb.DecodeBatchResponse
		allocated := allocatedBytes(func() {
			resp, err = c.DecodeBatch(t.Context(), &cb.DecodeBatchRequest{EncodedContents: [][]byte{raw, raw}, Preview: p})
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp, allocated
	}
	// The least of three calls each: a transport's buffers come and go.
	var resp *cb.DecodeBatchResponse
	without, with := ^uint64(0), ^uint64(0)
	for range 3 {
		_, a := call(nil)
		r, b := call(&cb.PreviewOptions{})
		without, with, resp = min(without, a), min(with, b), r
	}
	for i, r := range resp.GetResults() {
		p := r.GetPreview()
		if !p.GetTruncated() || !strings.HasPrefix(p.GetBody(), "Replied: Replied: ") || len(p.GetBody()) > preview.DefaultMaxBodyBytes {
			t.Errorf("result %d: preview of %d bytes, truncated %v", i, len(p.GetBody()), p.GetTruncated())
		}
	}
	t.Logf("allocated %d bytes without previews, %d with", without, with)
	if with > without+12<<20 {
		t.Errorf("previews added %d bytes to the call's allocations", with-without)
	}
}

// allocatedBytes is what the process allocates on the heap while f runs.
func allocatedBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
