// Package interop proves byte compatibility with the reference client,
// libxmtp, run as the npm package @xmtp/wasm-bindings under Node. The tests
// need node and `npm ci` in this folder (make interop-deps); they fail, not
// skip, without them, so CI can never pass without running them.
package interop

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/server"
)

// runReference runs reference.mjs in the given mode and decodes its JSON.
func runReference(t *testing.T, mode string, stdin any, out any) {
	t.Helper()
	runScript(t, "reference.mjs", mode, stdin, out)
}

// runScript runs a Node script of this folder with stdin as JSON and
// decodes the JSON it prints.
func runScript(t *testing.T, script, mode string, stdin any, out any) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required for the interoperability tests: %v", err)
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@xmtp", "wasm-bindings")); err != nil {
		t.Fatalf("@xmtp/wasm-bindings is not installed here; run `make interop-deps` (npm ci in interop/): %v", err)
	}
	cmd := exec.Command(node, script, mode)
	if stdin != nil {
		b, _ := json.Marshal(stdin)
		cmd.Stdin = bytes.NewReader(b)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, mode, err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("%s %s output: %v\n%s", script, mode, err, stdout)
	}
}

type refEnvelope struct {
	Type struct {
		AuthorityID  string `json:"authorityId"`
		TypeID       string `json:"typeId"`
		VersionMajor uint32 `json:"versionMajor"`
		VersionMinor uint32 `json:"versionMinor"`
	} `json:"type"`
	Parameters  map[string]string `json:"parameters"`
	Fallback    *string           `json:"fallback"`
	Compression *int32            `json:"compression"`
	Content     string            `json:"content"`
}

// protoOrNil is proto without a test to fail: nil for content that is not hex.
func (r refEnvelope) protoOrNil() *mc.EncodedContent {
	content, err := hex.DecodeString(r.Content)
	if err != nil {
		return nil
	}
	ec := &mc.EncodedContent{
		Type:       &mc.ContentTypeId{AuthorityId: r.Type.AuthorityID, TypeId: r.Type.TypeID, VersionMajor: r.Type.VersionMajor, VersionMinor: r.Type.VersionMinor},
		Parameters: r.Parameters, Fallback: r.Fallback, Content: content,
	}
	if r.Compression != nil {
		ec.Compression = mc.Compression(*r.Compression).Enum()
	}
	return ec
}

func (r refEnvelope) proto(t *testing.T) *mc.EncodedContent {
	ec := r.protoOrNil()
	if ec == nil {
		t.Fatalf("the reference's envelope content is not hex: %.64q", r.Content)
	}
	return ec
}

func fill(n int, v byte) []byte { return bytes.Repeat([]byte{v}, n) }

// The values reference.mjs encodes, case by case.
func interopValues() map[string]*cb.Content {
	remote := func(url, filename string, length uint32) *cb.RemoteAttachment {
		return &cb.RemoteAttachment{Url: url, ContentDigest: hexRepeat("ab", 32), Secret: fill(32, 1), Salt: fill(32, 2), Nonce: fill(12, 3),
			Scheme: "https://", ContentLength: proto.Uint32(length), Filename: proto.String(filename)}
	}
	info := func(r *cb.RemoteAttachment) *ct.RemoteAttachmentInfo {
		return &ct.RemoteAttachmentInfo{ContentDigest: r.ContentDigest, Secret: r.Secret, Nonce: r.Nonce, Salt: r.Salt, Scheme: r.Scheme, Url: r.Url, ContentLength: r.ContentLength, Filename: r.Filename}
	}
	meta, _ := structpb.NewStruct(map[string]any{"count": 2, "note": "x", "ok": true})
	return map[string]*cb.Content{
		"text":               {Value: &cb.Content_Text{Text: "Hello, interop ✓"}},
		"markdown":           {Value: &cb.Content_Markdown{Markdown: "# Heading\n\n*emphasis*"}},
		"reaction_added":     {Value: &cb.Content_Reaction{Reaction: &ct.ReactionV2{Reference: "abc123", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "👍", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE}}},
		"reaction_removed":   {Value: &cb.Content_Reaction{Reaction: &ct.ReactionV2{Reference: "abc123", ReferenceInboxId: "inbox-1", Action: ct.ReactionAction_REACTION_ACTION_REMOVED, Content: ":thumbsup:", Schema: ct.ReactionSchema_REACTION_SCHEMA_SHORTCODE}}},
		"read_receipt":       {Value: &cb.Content_ReadReceipt{ReadReceipt: &cb.ReadReceipt{}}},
		"attachment":         {Value: &cb.Content_Attachment{Attachment: &cb.Attachment{Filename: proto.String("notes.txt"), MimeType: "text/plain", Data: []byte("attached bytes")}}},
		"attachment_unnamed": {Value: &cb.Content_Attachment{Attachment: &cb.Attachment{MimeType: "application/octet-stream", Data: fill(5, 9)}}},
		"remote_attachment":  {Value: &cb.Content_RemoteAttachment{RemoteAttachment: remote("https://files.example.com/object/1", "photo.jpg", 1234)}},
		"multi_remote_attachment": {Value: &cb.Content_MultiRemoteAttachment{MultiRemoteAttachment: &ct.MultiRemoteAttachment{Attachments: []*ct.RemoteAttachmentInfo{
			info(remote("https://files.example.com/object/1", "photo.jpg", 1234)), info(remote("https://files.example.com/object/2", "second.png", 99)),
		}}}},
		"transaction_reference": {Value: &cb.Content_TransactionReference{TransactionReference: &cb.TransactionReference{
			Namespace: proto.String("eip155"), NetworkId: "8453", Reference: "0xfeedbeef",
			Metadata: &cb.TransactionMetadata{TransactionType: "transfer", Currency: "USDC", Amount: 100000.5, Decimals: 6, FromAddress: "0xfrom", ToAddress: "0xto"}}}},
		"transaction_reference_min": {Value: &cb.Content_TransactionReference{TransactionReference: &cb.TransactionReference{NetworkId: "1", Reference: "0xabc"}}},
		"wallet_send_calls": {Value: &cb.Content_WalletSendCalls{WalletSendCalls: &cb.WalletSendCalls{
			Version: "1.0", ChainId: "0x2105", From: "0xfrom",
			Calls: []*cb.WalletCall{{To: proto.String("0xto"), Data: proto.String("0xdata"), Value: proto.String("0x1"), Gas: proto.String("0x5208"),
				Metadata: &cb.WalletCallMetadata{Description: "Send 1 USDC", TransactionType: "transfer", Additional: map[string]string{"currency": "USDC"}}}},
			Capabilities: &cb.StringMap{Values: map[string]string{"paymasterService": "https://paymaster.example"}},
		}}},
		"actions": {Value: &cb.Content_Actions{Actions: &cb.Actions{
			Id: "menu-1", Description: "Choose one",
			Actions: []*cb.Action{
				{Id: "yes", Label: "Yes", ImageUrl: proto.String("https://img.example/yes.png"), Style: cb.ActionStyle_ACTION_STYLE_PRIMARY, ExpiresAt: timestamppb.New(time.Unix(0, 1700000000123000000))},
				{Id: "no", Label: "No", Style: cb.ActionStyle_ACTION_STYLE_DANGER},
			},
			ExpiresAt: timestamppb.New(time.Unix(0, 1700000000000000000)),
		}}},
		"intent": {Value: &cb.Content_Intent{Intent: &cb.Intent{Id: "menu-1", ActionId: "yes", Metadata: meta}}},
	}
}

func hexRepeat(s string, n int) string { return string(bytes.Repeat([]byte(s), n)) }

func contentClient(t *testing.T) cb.ContentServiceClient {
	t.Helper()
	conn := serve(t, server.Config{})
	return cb.NewContentServiceClient(conn)
}

// TestReferenceEnvelopes: for every type the reference has a standalone
// encoder, its envelope decodes in our Decode to the value it was given, and
// our Encode of that value equals its output (type, parameters as a map,
// fallback, and content as bytes, or as a JSON value for JSON types).
func TestReferenceEnvelopes(t *testing.T) {
	var ref map[string]refEnvelope
	runReference(t, "encode", nil, &ref)
	values := interopValues()
	if len(ref) != len(values) {
		t.Fatalf("reference produced %d cases, the test knows %d", len(ref), len(values))
	}
	client := contentClient(t)
	ctx := context.Background()
	for name, want := range values {
		t.Run(name, func(t *testing.T) {
			r, ok := ref[name]
			if !ok {
				t.Fatalf("reference has no case %q", name)
			}
			refEC := r.proto(t)
			refBytes, _ := proto.Marshal(refEC)
			dec, err := client.Decode(ctx, &cb.DecodeRequest{EncodedContent: refBytes})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(dec.GetContent(), want) {
				t.Errorf("our Decode of the reference's envelope\n got %v\nwant %v\n(undecoded: %v)", dec.GetContent(), want, dec.GetUndecoded())
			}
			enc, err := client.Encode(ctx, &cb.EncodeRequest{Input: &cb.EncodeRequest_Content{Content: want}})
			if err != nil {
				t.Fatal(err)
			}
			ours := enc.GetEnvelope()
			if !proto.Equal(ours.GetType(), refEC.GetType()) {
				t.Errorf("type %v, reference %v", ours.GetType(), refEC.GetType())
			}
			if !reflect.DeepEqual(nonNil(ours.GetParameters()), nonNil(refEC.GetParameters())) {
				t.Errorf("parameters %v, reference %v", ours.GetParameters(), refEC.GetParameters())
			}
			if ours.GetFallback() != refEC.GetFallback() || (ours.Fallback == nil) != (refEC.Fallback == nil) {
				t.Errorf("fallback %q, reference %q", ours.GetFallback(), refEC.GetFallback())
			}
			if isJSON(refEC) {
				if !jsonEqual(t, ours.GetContent(), refEC.GetContent()) {
					t.Errorf("JSON content\n ours %s\n  ref %s", ours.GetContent(), refEC.GetContent())
				}
			} else if !bytes.Equal(ours.GetContent(), refEC.GetContent()) {
				t.Errorf("content\n ours %x\n  ref %x", ours.GetContent(), refEC.GetContent())
			}
		})
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func isJSON(ec *mc.EncodedContent) bool {
	switch ec.GetType().GetTypeId() {
	case "transactionReference", "walletSendCalls", "actions", "intent":
		return true
	}
	return false
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("ours is not JSON: %v", err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("reference's is not JSON: %v", err)
	}
	return reflect.DeepEqual(x, y)
}

type refEncrypted struct {
	Payload       string `json:"payload"`
	ContentDigest string `json:"contentDigest"`
	Secret        string `json:"secret"`
	Salt          string `json:"salt"`
	Nonce         string `json:"nonce"`
	ContentLength uint32 `json:"contentLength"`
	Filename      string `json:"filename"`
	URL           string `json:"url,omitempty"`
	Scheme        string `json:"scheme,omitempty"`
}

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReferenceDecryptsOurAttachment: the reference's decryptAttachment
// opens our EncryptAttachment payload.
func TestReferenceDecryptsOurAttachment(t *testing.T) {
	client := contentClient(t)
	att := &cb.Attachment{Filename: proto.String("ours.txt"), MimeType: "text/plain", Data: []byte("encrypted by contentbackup")}
	enc, err := client.EncryptAttachment(context.Background(), &cb.EncryptAttachmentRequest{Attachment: att, Url: "https://files.example.com/ours"})
	if err != nil {
		t.Fatal(err)
	}
	ra := enc.GetRemoteAttachment()
	req := refEncrypted{
		Payload: hex.EncodeToString(enc.GetPayload()), ContentDigest: ra.GetContentDigest(), Secret: hex.EncodeToString(ra.GetSecret()),
		Salt: hex.EncodeToString(ra.GetSalt()), Nonce: hex.EncodeToString(ra.GetNonce()), ContentLength: ra.GetContentLength(),
		Filename: ra.GetFilename(), URL: ra.GetUrl(), Scheme: ra.GetScheme(),
	}
	var got struct {
		Filename string `json:"filename"`
		MimeType string `json:"mimeType"`
		Content  string `json:"content"`
	}
	runReference(t, "decrypt", req, &got)
	if got.Filename != "ours.txt" || got.MimeType != "text/plain" || string(mustHex(t, got.Content)) != "encrypted by contentbackup" {
		t.Errorf("reference decrypted %+v", got)
	}
}

// TestWeDecryptReferenceAttachment: our DecryptAttachment opens the
// reference's encryptAttachment payload.
func TestWeDecryptReferenceAttachment(t *testing.T) {
	var ref refEncrypted
	runReference(t, "encrypt", nil, &ref)
	client := contentClient(t)
	ra := &cb.RemoteAttachment{
		Url: "https://files.example.com/ref", ContentDigest: ref.ContentDigest, Secret: mustHex(t, ref.Secret), Salt: mustHex(t, ref.Salt),
		Nonce: mustHex(t, ref.Nonce), Scheme: "https://", ContentLength: proto.Uint32(ref.ContentLength), Filename: proto.String(ref.Filename),
	}
	dec, err := client.DecryptAttachment(context.Background(), &cb.DecryptAttachmentRequest{Payload: mustHex(t, ref.Payload), RemoteAttachment: ra})
	if err != nil {
		t.Fatal(err)
	}
	want := &cb.Attachment{Filename: proto.String("ref.bin"), MimeType: "application/octet-stream", Data: []byte("encrypted by the reference")}
	if !proto.Equal(dec.GetAttachment(), want) {
		t.Errorf("decrypted %v, want %v", dec.GetAttachment(), want)
	}
	if int(ref.ContentLength) != len(mustHex(t, ref.Payload)) {
		t.Errorf("reference contentLength %d, payload %d bytes", ref.ContentLength, len(mustHex(t, ref.Payload)))
	}
}

// TestCodecVectorsAreTheReferences: each golden vector of the codec's
// tests (internal/codec/testdata/reference-vectors.json) that names a call
// of the reference's bindings is exactly what that call writes today: the
// whole envelope's bytes, or, for a ": content" vector, its content (a
// JSON content compared as a value). So the codec's golden tests compare
// with the reference's output, not with our encoder's.
func TestCodecVectorsAreTheReferences(t *testing.T) {
	raw, err := os.ReadFile("../internal/codec/testdata/reference-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors map[string]struct {
			Hex       string  `json:"hex"`
			Reference *string `json:"reference"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	var ref map[string]refEnvelope
	runReference(t, "golden", nil, &ref)
	checked := 0
	for name, v := range file.Vectors {
		if v.Reference == nil {
			continue
		}
		checked++
		r, ok := ref[name]
		if !ok {
			t.Errorf("%s: reference.mjs golden has no case for it", name)
			continue
		}
		ec := r.proto(t)
		want := mustHex(t, v.Hex)
		switch {
		case strings.HasSuffix(name, ": content") && isJSON(ec):
			if !jsonEqual(t, ec.GetContent(), want) {
				t.Errorf("%s: the reference writes %s; the vector is %s", name, ec.GetContent(), want)
			}
		case strings.HasSuffix(name, ": content"):
			if !bytes.Equal(ec.GetContent(), want) {
				t.Errorf("%s: the reference writes %x; the vector is %x", name, ec.GetContent(), want)
			}
		default:
			got, err := proto.Marshal(ec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: the reference writes %x; the vector is %x", name, got, want)
			}
		}
	}
	if checked != len(ref) {
		t.Errorf("checked %d vectors; reference.mjs golden has %d cases", checked, len(ref))
	}
}
