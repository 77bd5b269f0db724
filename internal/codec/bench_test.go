package codec

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
)

// text200 is the 200-byte text of the Decode target.
var text200 = strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5)[:200]

func BenchmarkDecodeText200(b *testing.B) {
	reg := NewRegistry()
	ec, _ := reg.Encode(TypeText, text200)
	raw, _ := proto.Marshal(ec)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := reg.Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeResponseText200 includes building the API's outcome, as
// the Decode RPC does.
func BenchmarkDecodeResponseText200(b *testing.B) {
	benchDecodeResponse(b, TypeText, text200)
}

func BenchmarkDecodeAttachment1MiB(b *testing.B) {
	benchDecodeResponse(b, TypeAttachment, &cb.Attachment{MimeType: "application/octet-stream", Filename: ptr("blob.bin"), Data: bytes.Repeat([]byte{7}, 1<<20)})
}

func benchDecodeResponse(b *testing.B, t TypeID, value any) {
	reg := NewRegistry()
	ec, err := reg.Encode(t, value)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := proto.Marshal(ec)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if reg.DecodeResponse(raw).GetContent() == nil {
			b.Fatal("not decoded")
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	reg := NewRegistry()
	for _, v := range roundTripValues() {
		b.Run(v.typ.Type, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reg.Encode(v.typ, v.value); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	reg := NewRegistry()
	for _, v := range roundTripValues() {
		ec, err := reg.Encode(v.typ, v.value)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := proto.Marshal(ec)
		b.Run(v.typ.Type, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := reg.Decode(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
