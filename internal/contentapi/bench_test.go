package contentapi

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/contentbackup/contentbackup/internal/codec"
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
