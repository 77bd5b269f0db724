package contentapi

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
)

func FuzzDecode(f *testing.F) {
	reg := codec.NewRegistry(codec.WithMaxDecompressedSize(1 << 20))
	for _, c := range contents() {
		ec, err := Encode(reg, c)
		if err == nil {
			b, _ := proto.Marshal(ec)
			f.Add(b)
		}
	}
	for _, alg := range []mc.Compression{mc.Compression_COMPRESSION_DEFLATE, mc.Compression_COMPRESSION_GZIP} {
		ec := textEnvelope(codec.TypeText, "")
		ec.Content, _ = codec.Compress([]byte("compressed text"), alg)
		ec.Compression = &alg
		b, _ := proto.Marshal(ec)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		resp := outcomeOf(reg, b)
		switch {
		case resp.GetContent() != nil:
			if resp.GetContentType() == "" {
				t.Fatal("decoded content without a content type")
			}
		case resp.GetUndecoded() != nil:
			if !bytes.Equal(resp.GetUndecoded().GetEncodedContent(), b) {
				t.Fatal("undecoded outcome lost the original bytes")
			}
		default:
			t.Fatal("no outcome")
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	reg := codec.NewRegistry(codec.WithMaxDecompressedSize(1 << 20))
	text, _ := proto.Marshal(textEnvelope(codec.TypeText, "nested"))
	f.Add("ab12", "xmtp.org/text:1.0", text)
	f.Add("", "", []byte{})
	f.Add("ab", "x", []byte{0x0a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, reference, contentType string, nested []byte) {
		outer := &mc.EncodedContent{Type: codec.TypeReply.Proto(), Parameters: map[string]string{"reference": reference, "contentType": contentType}, Content: nested}
		b, err := proto.Marshal(outer)
		if err != nil {
			return // not valid UTF-8 in a string field
		}
		resp := outcomeOf(reg, b)
		if r := resp.GetContent().GetReply(); r != nil {
			if r.GetReference() != reference {
				t.Fatalf("reference %q, want %q", r.GetReference(), reference)
			}
			if r.GetNested() == nil {
				t.Fatal("reply without nested content or undecoded")
			}
		} else if !bytes.Equal(resp.GetUndecoded().GetEncodedContent(), b) {
			t.Fatal("undecoded reply lost its bytes")
		}
	})
}
