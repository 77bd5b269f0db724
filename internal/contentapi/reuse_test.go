package contentapi

import (
	"testing"

	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// Decoding a page reuses one envelope's memory from message to message
// (codec.Scratch). These hold that to decoding each message on its own:
// every response equals a fresh decode of its bytes, checked after the
// whole sequence, so a response that still referred to recycled memory
// (an envelope, a parameters map) would show the later messages' values.

func checkReuseMatches(t *testing.T, reg *codec.Registry, inputs [][]byte) {
	t.Helper()
	var s codec.Scratch
	kept := make([]any, len(inputs))
	for i, b := range inputs {
		resp, err := DecodeResponse(reg, b, Options{DecodeOptions: codec.DecodeOptions{Scratch: &s}})
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		kept[i] = resp
	}
	for i, b := range inputs {
		if want := outcomeOf(reg, b); !proto.Equal(kept[i].(proto.Message), want) {
			t.Fatalf("input %d: decoded in turn %v, alone %v", i, kept[i], want)
		}
	}
}

func encodedContents(t testing.TB, reg *codec.Registry) [][]byte {
	var out [][]byte
	for _, c := range contents() {
		ec, err := Encode(reg, c)
		if err != nil {
			continue
		}
		b, err := proto.Marshal(ec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	// Compressed, with parameters; unknown types; not an envelope.
	for _, alg := range []mc.Compression{mc.Compression_COMPRESSION_DEFLATE, mc.Compression_COMPRESSION_GZIP} {
		ec := textEnvelope(codec.TypeText, "")
		ec.Content, _ = codec.Compress([]byte("compressed text"), alg)
		ec.Compression = &alg
		b, _ := proto.Marshal(ec)
		out = append(out, b)
	}
	custom, _ := proto.Marshal(&mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 1},
		Parameters: map[string]string{"question": "why"}, Content: []byte("x")})
	return append(out, custom, []byte("\xff not an envelope"))
}

func TestDecodeReusingMatchesAlone(t *testing.T) {
	reg := codec.NewRegistry()
	inputs := encodedContents(t, reg)
	checkReuseMatches(t, reg, inputs)
	// And in the reverse order, each type after different neighbours.
	for i, j := 0, len(inputs)-1; i < j; i, j = i+1, j-1 {
		inputs[i], inputs[j] = inputs[j], inputs[i]
	}
	checkReuseMatches(t, reg, inputs)
}

func FuzzDecodeReusingMatchesAlone(f *testing.F) {
	reg := codec.NewRegistry(codec.WithMaxDecompressedSize(1 << 20))
	inputs := encodedContents(f, reg)
	for i := range inputs {
		f.Add(inputs[i], inputs[(i+1)%len(inputs)])
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		checkReuseMatches(t, reg, [][]byte{a, b, a, b})
	})
}
