package codec

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
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
		if _, _, err := reg.Decode(raw, DecodeOptions{}); err != nil {
			b.Fatal(err)
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
				if _, _, err := reg.Decode(raw, DecodeOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
