package codec

import (
	"testing"

	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// Fuzz targets for every parser of untrusted bytes. Seeds live in
// testdata/fuzz/<target>; the Makefile's fuzz target runs each for a bounded
// time. Decoding must never panic, must keep the input bytes of anything it
// cannot decode (CTYPE-008), and must stay within the decompression limit.

// fuzzJSON checks one JSON decoder: no panic, and a value that encodes
// decodes again.
func fuzzJSON(f *testing.F, c Codec, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := c.Decode(&mc.EncodedContent{Type: c.ContentType().Proto(), Content: b}, nil)
		if err != nil {
			if kindOf(err) != KindDecodeFailed {
				t.Fatalf("error of kind %v: %v", kindOf(err), err)
			}
			return
		}
		ec, err := c.Encode(v)
		if err != nil {
			return // decodable history may violate encode-only limits
		}
		if _, err := c.Decode(ec, nil); err != nil {
			t.Fatalf("our own encoding of %v does not decode: %v", v, err)
		}
	})
}

func FuzzDecodeTransactionReference(f *testing.F) {
	fuzzJSON(f, TransactionReferenceCodec{},
		`{"namespace":"eip155","networkId":"8453","reference":"0xabc","metadata":{"transactionType":"transfer","currency":"USDC","amount":100000.0,"decimals":6,"fromAddress":"0x1","toAddress":"0x2"}}`,
		`{"networkId":1,"reference":""}`)
}

func FuzzDecodeWalletSendCalls(f *testing.F) {
	fuzzJSON(f, WalletSendCallsCodec{},
		`{"version":"1.0","chainId":"0x2105","from":"0xf","calls":[{"to":"0xt","data":"0x","metadata":{"description":"d","transactionType":"t","x":"y"}}],"capabilities":{"a":"b"}}`,
		`{"version":"1","chainId":"1","from":"f","calls":[]}`)
}

func FuzzDecodeActions(f *testing.F) {
	fuzzJSON(f, ActionsCodec{},
		`{"id":"m","description":"d","actions":[{"id":"1","label":"L","imageUrl":"u","style":"primary","expiresAt":"2023-11-14T22:13:20.000Z"}],"expiresAt":"2023-11-14T22:13:20.000Z"}`,
		`{"id":"m","description":"d","actions":[{"id":"1","label":"L","image_url":"u","expires_at":"2023-11-14T23:13:20+01:00"}]}`)
}

func FuzzDecodeIntent(f *testing.F) {
	fuzzJSON(f, IntentCodec{}, `{"id":"a1","actionId":"y"}`, `{"id":"a","action_id":"b","metadata":{"n":1,"l":[null,true],"o":{"k":"v"}}}`)
}

func FuzzDecodeLegacyReaction(f *testing.F) {
	fuzzJSON(f, LegacyReactionCodec{}, `{"action":"added","reference":"message-id-123","schema":"unicode","content":"👍"}`,
		`{"action":"removed","reference":"r","referenceInboxId":"i","schema":"custom","content":"x"}`)
}

// FuzzUnmarshalEnvelopeMatchesProto holds the hand-written envelope parser
// to proto.Unmarshal: the same accept or reject, and the same message
// but for unknown fields.
func FuzzUnmarshalEnvelopeMatchesProto(f *testing.F) {
	for _, v := range roundTripValues() {
		if ec, err := NewRegistry().Encode(v.typ, v.value); err == nil {
			b, _ := proto.Marshal(ec)
			f.Add(b)
		}
	}
	f.Add([]byte{0x0a, 0x02, 0x18, 0x01, 0x0a, 0x02, 0x20, 0x05}) // type given twice: merged
	f.Add([]byte{0x12, 0x04, 0x0a, 0x00, 0x12, 0x00, 0x28, 0x07}) // map entry, compression 7
	f.Add([]byte{0x0b, 0x0c, 0x22, 0x00})                         // a group
	f.Fuzz(func(t *testing.T, b []byte) {
		var ours, theirs mc.EncodedContent
		errOurs := unmarshalEnvelope(b, &ours, new(mc.ContentTypeId), nil)
		errTheirs := proto.Unmarshal(b, &theirs)
		if (errOurs == nil) != (errTheirs == nil) {
			t.Fatalf("ours: %v, proto: %v", errOurs, errTheirs)
		}
		// Unknown fields are the one difference by design: ours skips them
		// (the original bytes are kept whole anyway).
		theirs.ProtoReflect().SetUnknown(nil)
		if theirs.Type != nil {
			theirs.Type.ProtoReflect().SetUnknown(nil)
		}
		if errOurs == nil && !proto.Equal(&ours, &theirs) {
			t.Fatalf("ours %v\nproto %v", &ours, &theirs)
		}
	})
}
