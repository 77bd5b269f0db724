package contentapi

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/preview"
)

// BenchmarkDecodeResponseText200 includes building the API's outcome, as
// the Decode RPC does.
func BenchmarkDecodeResponseText200(b *testing.B) {
	benchDecodeResponse(b, codec.TypeText, text200)
}

func BenchmarkDecodeAttachment1MiB(b *testing.B) {
	benchDecodeResponse(b, codec.TypeAttachment, &codec.Attachment{MimeType: "application/octet-stream", Filename: ptr("blob.bin"), Data: bytes.Repeat([]byte{7}, 1<<20)})
}

func benchDecodeResponse(b *testing.B, t codec.TypeID, value any) {
	reg := codec.NewRegistry()
	ec, err := reg.Encode(t, value)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := proto.Marshal(ec)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if outcomeOf(reg, raw).GetContent() == nil {
			b.Fatal("not decoded")
		}
	}
}

// BenchmarkDecodeResponseText200Marshal is the server's share of one
// message of a DecodeBatch: the outcome and its wire bytes. Beside
// BenchmarkDecodeResponseText200PreviewMarshal, it is what a preview costs
// the server, without the client's unmarshalling.
func BenchmarkDecodeResponseText200Marshal(b *testing.B) {
	benchDecodeMarshal(b, Options{})
}

func BenchmarkDecodeResponseText200PreviewMarshal(b *testing.B) {
	words, err := preview.Defaults()
	if err != nil {
		b.Fatal(err)
	}
	benchDecodeMarshal(b, Options{Preview: &Previewing{Words: words.For("")}})
}

func benchDecodeMarshal(b *testing.B, o Options) {
	reg := codec.NewRegistry()
	ec, err := reg.Encode(codec.TypeText, text200)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := proto.Marshal(ec)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := DecodeResponse(reg, raw, o)
		if err != nil {
			b.Fatal(err)
		}
		buf = buf[:resp.SizeVT()]
		if _, err := resp.MarshalToSizedBufferVT(buf); err != nil {
			b.Fatal(err)
		}
	}
}
