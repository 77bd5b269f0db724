package codec

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
)

// Every row of the CTYPE section 7.2 validation table, in both columns
// (CTYPE-019).

func decodeJSON(t *testing.T, c Codec, s string) (any, error) {
	t.Helper()
	return c.Decode(&mc.EncodedContent{Type: c.ContentType().Proto(), Content: []byte(s)}, nil)
}

func jsonMembers(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCTYPE019_TextEncoding(t *testing.T) {
	for _, c := range []Codec{TextCodec{}, MarkdownCodec{}} {
		ec, err := c.Encode("x")
		if err != nil || ec.GetParameters()["encoding"] != "UTF-8" {
			t.Errorf("%v encode: encoding %q, %v", c.ContentType(), ec.GetParameters()["encoding"], err)
		}
		if v, err := c.Decode(&mc.EncodedContent{Content: []byte("é")}, nil); err != nil || v != "é" {
			t.Errorf("%v decode without encoding: %v, %v", c.ContentType(), v, err)
		}
		for _, enc := range []string{"UTF-16", "latin1", ""} {
			_, err := c.Decode(&mc.EncodedContent{Parameters: map[string]string{"encoding": enc}, Content: []byte("x")}, nil)
			if kindOf(err) != KindDecodeFailed {
				t.Errorf("%v decode with encoding %q: %v", c.ContentType(), enc, err)
			}
		}
		if _, err := c.Decode(&mc.EncodedContent{Content: []byte{0xff}}, nil); kindOf(err) != KindDecodeFailed {
			t.Errorf("%v: invalid UTF-8 decoded", c.ContentType())
		}
		if _, err := c.Encode("\xff"); kindOf(err) != KindEncodeFailed {
			t.Errorf("%v: invalid UTF-8 encoded", c.ContentType())
		}
	}
}

func TestCTYPE019_JSONMembersEncodeOmitsAbsentOptional(t *testing.T) {
	ec, _ := TransactionReferenceCodec{}.Encode(&TransactionReference{NetworkID: "1", Reference: "0x"})
	if m := jsonMembers(t, ec.GetContent()); len(m) != 2 || m["networkId"] != "1" || m["reference"] != "0x" {
		t.Errorf("transaction reference members %v", m)
	}
	ec, _ = ActionsCodec{}.Encode(&Actions{ID: "a", Description: "d", Actions: []*Action{{ID: "1", Label: "L"}}})
	m := jsonMembers(t, ec.GetContent())
	if _, ok := m["expiresAt"]; ok || len(m["actions"].([]any)[0].(map[string]any)) != 2 {
		t.Errorf("actions members %s", ec.GetContent())
	}
	ec, _ = WalletSendCallsCodec{}.Encode(&WalletSendCalls{Version: "1", ChainID: "1", From: "f", Calls: []*WalletCall{{}}})
	if string(ec.GetContent()) != `{"version":"1","chainId":"1","from":"f","calls":[{}]}` {
		t.Errorf("wallet send calls %s", ec.GetContent())
	}
	ec, _ = IntentCodec{}.Encode(&Intent{ID: "i", ActionID: "a"})
	if m := jsonMembers(t, ec.GetContent()); len(m) != 2 {
		t.Errorf("intent members %v", m)
	}
}

func TestCTYPE019_JSONMembersEncodeRequired(t *testing.T) {
	cases := map[string]struct {
		c Codec
		v any
	}{
		"transaction networkId":     {TransactionReferenceCodec{}, &TransactionReference{Reference: "0x"}},
		"transaction metadata type": {TransactionReferenceCodec{}, &TransactionReference{NetworkID: "1", Metadata: &TransactionMetadata{Currency: "c", FromAddress: "f", ToAddress: "t"}}},
		"transaction amount NaN":    {TransactionReferenceCodec{}, &TransactionReference{NetworkID: "1", Metadata: &TransactionMetadata{TransactionType: "x", Currency: "c", FromAddress: "f", ToAddress: "t", Amount: nan()}}},
		"wallet version":            {WalletSendCallsCodec{}, &WalletSendCalls{ChainID: "1", From: "f"}},
		"wallet chainId":            {WalletSendCallsCodec{}, &WalletSendCalls{Version: "1", From: "f"}},
		"wallet from":               {WalletSendCallsCodec{}, &WalletSendCalls{Version: "1", ChainID: "1"}},
		"wallet call metadata":      {WalletSendCallsCodec{}, &WalletSendCalls{Version: "1", ChainID: "1", From: "f", Calls: []*WalletCall{{Metadata: &WalletCallMetadata{Description: "d"}}}}},
		"actions id":                {ActionsCodec{}, &Actions{Description: "d", Actions: []*Action{{ID: "1", Label: "L"}}}},
		"actions description":       {ActionsCodec{}, &Actions{ID: "a", Actions: []*Action{{ID: "1", Label: "L"}}}},
		"action label":              {ActionsCodec{}, &Actions{ID: "a", Description: "d", Actions: []*Action{{ID: "1"}}}},
		"action style":              {ActionsCodec{}, &Actions{ID: "a", Description: "d", Actions: []*Action{{ID: "1", Label: "L", Style: 9}}}},
		"intent id":                 {IntentCodec{}, &Intent{ActionID: "a"}},
		"intent actionId":           {IntentCodec{}, &Intent{ID: "i"}},
		"wrong value type":          {IntentCodec{}, "a string"},
	}
	for name, tc := range cases {
		if _, err := tc.c.Encode(tc.v); kindOf(err) != KindEncodeFailed {
			t.Errorf("%s: %v, want encode failure", name, err)
		}
	}
}

func TestCTYPE019_JSONMembersDecodeTypes(t *testing.T) {
	bad := map[string]struct {
		c    Codec
		json string
	}{
		"not an object":             {IntentCodec{}, `["id"]`},
		"null document":             {IntentCodec{}, `null`},
		"id a number":               {IntentCodec{}, `{"id":1,"actionId":"a"}`},
		"required missing":          {IntentCodec{}, `{"id":"i"}`},
		"required null":             {IntentCodec{}, `{"id":"i","actionId":null}`},
		"metadata not object":       {IntentCodec{}, `{"id":"i","actionId":"a","metadata":[1]}`},
		"networkId object":          {TransactionReferenceCodec{}, `{"networkId":{},"reference":"r"}`},
		"reference missing":         {TransactionReferenceCodec{}, `{"networkId":"1"}`},
		"amount a string":           {TransactionReferenceCodec{}, `{"networkId":"1","reference":"r","metadata":{"transactionType":"t","currency":"c","amount":"1","decimals":1,"fromAddress":"f","toAddress":"t"}}`},
		"decimals fractional":       {TransactionReferenceCodec{}, `{"networkId":"1","reference":"r","metadata":{"transactionType":"t","currency":"c","amount":1,"decimals":1.5,"fromAddress":"f","toAddress":"t"}}`},
		"decimals over uint32":      {TransactionReferenceCodec{}, `{"networkId":"1","reference":"r","metadata":{"transactionType":"t","currency":"c","amount":1,"decimals":4294967296,"fromAddress":"f","toAddress":"t"}}`},
		"decimals negative":         {TransactionReferenceCodec{}, `{"networkId":"1","reference":"r","metadata":{"transactionType":"t","currency":"c","amount":1,"decimals":-1,"fromAddress":"f","toAddress":"t"}}`},
		"calls not array":           {WalletSendCallsCodec{}, `{"version":"1","chainId":"1","from":"f","calls":{}}`},
		"call to a number":          {WalletSendCallsCodec{}, `{"version":"1","chainId":"1","from":"f","calls":[{"to":5}]}`},
		"call metadata required":    {WalletSendCallsCodec{}, `{"version":"1","chainId":"1","from":"f","calls":[{"metadata":{"description":"d"}}]}`},
		"call metadata extra non-s": {WalletSendCallsCodec{}, `{"version":"1","chainId":"1","from":"f","calls":[{"metadata":{"description":"d","transactionType":"t","n":1}}]}`},
		"capabilities non-string":   {WalletSendCallsCodec{}, `{"version":"1","chainId":"1","from":"f","calls":[],"capabilities":{"a":true}}`},
		"actions not array":         {ActionsCodec{}, `{"id":"a","description":"d","actions":"x"}`},
		"action label missing":      {ActionsCodec{}, `{"id":"a","description":"d","actions":[{"id":"1"}]}`},
		"action style unknown":      {ActionsCodec{}, `{"id":"a","description":"d","actions":[{"id":"1","label":"L","style":"loud"}]}`},
		"expiresAt not RFC 3339":    {ActionsCodec{}, `{"id":"a","description":"d","actions":[],"expiresAt":"tomorrow"}`},
		"trailing garbage":          {ActionsCodec{}, `{"id":"a","description":"d","actions":[]} x`},
	}
	for name, tc := range bad {
		if _, err := decodeJSON(t, tc.c, tc.json); kindOf(err) != KindDecodeFailed {
			t.Errorf("%s: %v, want decode failure", name, err)
		}
	}
}

func TestCTYPE019_JSONMembersDecodeOptionalNullAndUnknown(t *testing.T) {
	v, err := decodeJSON(t, TransactionReferenceCodec{}, `{"namespace":null,"networkId":"1","reference":"r","metadata":null,"extra":{"deep":[1]}}`)
	if err != nil || valueDiff(v, &TransactionReference{NetworkID: "1", Reference: "r"}) != "" {
		t.Errorf("transaction reference: %v, %v", v, err)
	}
	v, err = decodeJSON(t, ActionsCodec{}, `{"id":"a","description":"d","actions":[{"id":"1","label":"L","imageUrl":null,"style":null,"expiresAt":null,"x":1}],"expiresAt":null,"unknown":true}`)
	if err != nil || valueDiff(v, &Actions{ID: "a", Description: "d", Actions: []*Action{{ID: "1", Label: "L"}}}) != "" {
		t.Errorf("actions: %v, %v", v, err)
	}
	v, err = decodeJSON(t, WalletSendCallsCodec{}, `{"version":"1","chainId":"1","from":"f","calls":[{"to":null,"metadata":{"description":"d","transactionType":"t","currency":"USDC","note":"n"}}],"capabilities":null,"x":[]}`)
	want := &WalletSendCalls{Version: "1", ChainID: "1", From: "f", Calls: []*WalletCall{{Metadata: &WalletCallMetadata{Description: "d", TransactionType: "t", Additional: map[string]string{"currency": "USDC", "note": "n"}}}}}
	if err != nil || valueDiff(v, want) != "" {
		t.Errorf("wallet send calls: %v, %v", v, err)
	}
	v, err = decodeJSON(t, IntentCodec{}, `{"id":"i","actionId":"a","metadata":null,"other":1}`)
	if err != nil || v.(*Intent).Metadata != nil {
		t.Errorf("intent: %v, %v", v, err)
	}
}

func TestCTYPE019_NetworkID(t *testing.T) {
	ec, _ := TransactionReferenceCodec{}.Encode(&TransactionReference{NetworkID: "8453", Reference: "r"})
	if jsonMembers(t, ec.GetContent())["networkId"] != "8453" {
		t.Errorf("networkId not written as a string: %s", ec.GetContent())
	}
	for in, want := range map[string]string{`"8453"`: "8453", `1`: "1", `8453`: "8453", `1e3`: "1000", `-2`: "-2", `"0x2105"`: "0x2105"} {
		v, err := decodeJSON(t, TransactionReferenceCodec{}, `{"networkId":`+in+`,"reference":"r"}`)
		if err != nil || v.(*TransactionReference).NetworkID != want {
			t.Errorf("networkId %s: %v, %v; want %q", in, v, err, want)
		}
	}
}

func TestCTYPE019_ActionsCount(t *testing.T) {
	many := &Actions{ID: "a", Description: "d"}
	for i := 0; i < 11; i++ {
		many.Actions = append(many.Actions, &Action{ID: strings.Repeat("x", i+1), Label: "L"})
	}
	if _, err := (ActionsCodec{}).Encode(many); kindOf(err) != KindEncodeFailed {
		t.Errorf("11 actions: %v", err)
	}
	many.Actions = many.Actions[:10]
	if _, err := (ActionsCodec{}).Encode(many); err != nil {
		t.Errorf("10 actions: %v", err)
	}
	if _, err := (ActionsCodec{}).Encode(&Actions{ID: "a", Description: "d"}); kindOf(err) != KindEncodeFailed {
		t.Errorf("0 actions: %v", err)
	}
	dup := &Actions{ID: "a", Description: "d", Actions: []*Action{{ID: "1", Label: "A"}, {ID: "1", Label: "B"}}}
	if _, err := (ActionsCodec{}).Encode(dup); kindOf(err) != KindEncodeFailed {
		t.Errorf("duplicate ids: %v", err)
	}
	var list []string
	for i := 0; i < 12; i++ {
		list = append(list, `{"id":"same","label":"L"}`)
	}
	for name, actions := range map[string]string{"empty": "[]", "twelve duplicates": "[" + strings.Join(list, ",") + "]"} {
		if _, err := decodeJSON(t, ActionsCodec{}, `{"id":"a","description":"d","actions":`+actions+`}`); err != nil {
			t.Errorf("decode %s: %v", name, err)
		}
	}
}

func TestCTYPE019_ExpiresAt(t *testing.T) {
	a := validActions()
	a.ExpiresAt = mustTimestamp(t, "2023-11-14T23:13:20.999999+01:00")
	ec, err := ActionsCodec{}.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	if got := jsonMembers(t, ec.GetContent())["expiresAt"]; got != "2023-11-14T22:13:20.999Z" {
		t.Errorf("expiresAt %v", got)
	}
	a.ExpiresAt = mustTimestamp(t, "2023-11-14T22:13:20Z")
	ec, _ = ActionsCodec{}.Encode(a)
	if got := jsonMembers(t, ec.GetContent())["expiresAt"]; got != "2023-11-14T22:13:20.000Z" {
		t.Errorf("expiresAt %v: exactly three fractional digits", got)
	}
	for _, doc := range []string{
		`{"id":"a","description":"d","actions":[{"id":"1","label":"L","expiresAt":"2023-11-15T00:13:20.5+02:00"}],"expiresAt":"2023-11-15T00:13:20.5+02:00"}`,
		`{"id":"a","description":"d","actions":[{"id":"1","label":"L","expires_at":"2023-11-14T22:13:20.500Z"}],"expires_at":"2023-11-14T22:13:20.500Z"}`,
	} {
		v, err := decodeJSON(t, ActionsCodec{}, doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		want := time.Date(2023, 11, 14, 22, 13, 20, 5e8, time.UTC)
		got := v.(*Actions)
		if !got.ExpiresAt.AsTime().Equal(want) || !got.Actions[0].ExpiresAt.AsTime().Equal(want) {
			t.Errorf("%s: %v", doc, got)
		}
	}
}

func TestCTYPE019_CamelCaseAndAliases(t *testing.T) {
	a := validActions()
	a.Actions[0].ImageURL = ptr("https://i.example/x.png")
	ec, _ := ActionsCodec{}.Encode(a)
	if first := jsonMembers(t, ec.GetContent())["actions"].([]any)[0].(map[string]any); first["imageUrl"] != "https://i.example/x.png" {
		t.Errorf("imageUrl not camel case: %s", ec.GetContent())
	}
	ec, _ = IntentCodec{}.Encode(&Intent{ID: "i", ActionID: "a"})
	if jsonMembers(t, ec.GetContent())["actionId"] != "a" {
		t.Errorf("actionId not camel case: %s", ec.GetContent())
	}
	v, err := decodeJSON(t, ActionsCodec{}, `{"id":"a","description":"d","actions":[{"id":"1","label":"L","image_url":"u"}]}`)
	if err != nil || *v.(*Actions).Actions[0].ImageURL != "u" {
		t.Errorf("image_url alias: %v, %v", v, err)
	}
	v, err = decodeJSON(t, IntentCodec{}, `{"id":"i","action_id":"b"}`)
	if err != nil || v.(*Intent).ActionID != "b" {
		t.Errorf("action_id alias: %v, %v", v, err)
	}
}

func TestCTYPE019_IntentMetadataSize(t *testing.T) {
	// {"k":"…"} is 8 bytes of framing around the value.
	fits, _ := structpb.NewStruct(map[string]any{"k": strings.Repeat("x", MaxIntentMetadataSize-8)})
	if _, err := (IntentCodec{}).Encode(&Intent{ID: "i", ActionID: "a", Metadata: fits}); err != nil {
		t.Errorf("10240-byte metadata: %v", err)
	}
	over, _ := structpb.NewStruct(map[string]any{"k": strings.Repeat("x", MaxIntentMetadataSize-7)})
	if _, err := (IntentCodec{}).Encode(&Intent{ID: "i", ActionID: "a", Metadata: over}); kindOf(err) != KindEncodeFailed {
		t.Errorf("10241-byte metadata: %v", err)
	}
	big := `{"id":"i","actionId":"a","metadata":{"k":"` + strings.Repeat("x", 3*MaxIntentMetadataSize) + `"}}`
	if _, err := decodeJSON(t, IntentCodec{}, big); err != nil {
		t.Errorf("decode of large metadata: %v", err)
	}
}

// The Remote attachment parameters table (section 7.1), both directions.
func TestCTYPE014_RemoteAttachmentScheme(t *testing.T) {
	encodeCases := map[string]func(*RemoteAttachment){
		"http to a public host":  func(r *RemoteAttachment) { r.URL, r.Scheme = "http://files.example.com/x", "http://" },
		"legacy https on encode": func(r *RemoteAttachment) { r.Scheme = "https" },
		"URL scheme mismatch":    func(r *RemoteAttachment) { r.URL = "http://localhost/x" },
		"ftp":                    func(r *RemoteAttachment) { r.URL, r.Scheme = "ftp://x/y", "ftp://" },
		"relative URL":           func(r *RemoteAttachment) { r.URL = "/x" },
		"short secret":           func(r *RemoteAttachment) { r.Secret = make([]byte, 31) },
		"short salt":             func(r *RemoteAttachment) { r.Salt = nil },
		"long nonce":             func(r *RemoteAttachment) { r.Nonce = make([]byte, 16) },
		"uppercase digest":       func(r *RemoteAttachment) { r.ContentDigest = strings.ToUpper(r.ContentDigest) },
		"short digest":           func(r *RemoteAttachment) { r.ContentDigest = "abcd" },
	}
	for name, mutate := range encodeCases {
		r := validRemote()
		mutate(r)
		if _, err := (RemoteAttachmentCodec{}).Encode(r); kindOf(err) != KindEncodeFailed {
			t.Errorf("encode %s: %v", name, err)
		}
	}
	for _, host := range []string{"localhost", "127.0.0.1", "127.1.2.3", "[::1]"} {
		r := validRemote()
		r.URL, r.Scheme = "http://"+host+":9000/x", "http://"
		if _, err := (RemoteAttachmentCodec{}).Encode(r); err != nil {
			t.Errorf("http to %s: %v", host, err)
		}
	}
	// Decode accepts the legacy scheme values, normalized, and keeps the
	// stored envelope unchanged.
	reg := NewRegistry()
	for legacy, want := range map[string]string{"https": "https://", "http": "http://"} {
		r := validRemote()
		if want == "http://" {
			r.URL, r.Scheme = "http://localhost/x", "http://"
		}
		ec, _ := RemoteAttachmentCodec{}.Encode(r)
		ec.Parameters["scheme"] = legacy
		raw := mustMarshal(t, ec)
		d, _, err := reg.Decode(raw, DecodeOptions{})
		if got, _ := d.Value.(*RemoteAttachment); err != nil || got.Scheme != want {
			t.Errorf("legacy %q: %v, %v", legacy, d.Value, err)
		}
		if ec.Parameters["scheme"] != legacy {
			t.Errorf("legacy %q: stored envelope changed", legacy)
		}
	}
	decodeCases := map[string]func(map[string]string, *mc.EncodedContent){
		"missing digest":     func(p map[string]string, _ *mc.EncodedContent) { delete(p, "contentDigest") },
		"missing scheme":     func(p map[string]string, _ *mc.EncodedContent) { delete(p, "scheme") },
		"secret not hex":     func(p map[string]string, _ *mc.EncodedContent) { p["secret"] = "zz" },
		"nonce wrong length": func(p map[string]string, _ *mc.EncodedContent) { p["nonce"] = "00" },
		"http to public host": func(p map[string]string, ec *mc.EncodedContent) {
			p["scheme"] = "http"
			ec.Content = []byte("http://example.com/x")
		},
		"contentLength too big": func(p map[string]string, _ *mc.EncodedContent) { p["contentLength"] = "4294967296" },
		"contentLength sign":    func(p map[string]string, _ *mc.EncodedContent) { p["contentLength"] = "-1" },
	}
	for name, mutate := range decodeCases {
		ec, _ := RemoteAttachmentCodec{}.Encode(validRemote())
		mutate(ec.Parameters, ec)
		if _, err := (RemoteAttachmentCodec{}).Decode(ec, nil); kindOf(err) != KindDecodeFailed {
			t.Errorf("decode %s: %v", name, err)
		}
	}
	ec, _ := RemoteAttachmentCodec{}.Encode(validRemote())
	ec.Parameters["contentLength"] = "4294967295"
	if _, err := (RemoteAttachmentCodec{}).Decode(ec, nil); err != nil {
		t.Errorf("contentLength 4294967295: %v", err)
	}
}

func TestRemoteAttachmentFallbacks(t *testing.T) {
	r := validRemote()
	ec, _ := RemoteAttachmentCodec{}.Encode(r)
	if ec.GetFallback() != "Can't display a.png. This app doesn't support remote attachments." {
		t.Errorf("fallback %q", ec.GetFallback())
	}
	r.Filename = nil
	ec, _ = RemoteAttachmentCodec{}.Encode(r)
	if ec.GetFallback() != "Can't display this content. This app doesn't support remote attachments." {
		t.Errorf("fallback %q", ec.GetFallback())
	}
	att, _ := AttachmentCodec{}.Encode(&Attachment{MimeType: "a/b", Filename: ptr("")})
	if att.GetFallback() != "Can't display this content. This app doesn't support attachments." {
		t.Errorf("fallback %q", att.GetFallback())
	}
}

func nan() float64 { var z float64; return z / z }
