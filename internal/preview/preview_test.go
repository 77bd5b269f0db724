package preview

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/codec"
)

func words(t *testing.T) *Words {
	t.Helper()
	w, err := Defaults()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func ptr[T any](v T) *T { return &v }

// previewOf encodes v as type typ, decodes its bytes as a caller's would
// be, and previews the outcome.
func previewOf(t *testing.T, w *Words, reg *codec.Registry, typ codec.TypeID, v any, o Options) Preview {
	t.Helper()
	ec, err := reg.Encode(typ, v)
	if err != nil {
		t.Fatalf("encode %s: %v", typ, err)
	}
	return previewBytes(t, w, reg, mustMarshal(t, ec), o)
}

func previewBytes(t *testing.T, w *Words, reg *codec.Registry, b []byte, o Options) Preview {
	t.Helper()
	d, ec, err := reg.Decode(b, codec.DecodeOptions{})
	return w.Of(reg, describe(reg, ec), d, ec, err, o)
}

// describe is what Of's callers pass: the description of the envelope's
// type, none without an envelope.
func describe(reg *codec.Registry, ec *mc.EncodedContent) codec.Description {
	if ec == nil {
		return codec.Description{}
	}
	return reg.Describe(codec.TypeIDOf(ec.GetType()))
}

func mustEncode(t *testing.T, reg *codec.Registry, typ codec.TypeID, v any) *mc.EncodedContent {
	t.Helper()
	ec, err := reg.Encode(typ, v)
	if err != nil {
		t.Fatalf("encode %s: %v", typ, err)
	}
	return ec
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCTYPE010_PreviewEveryCatalogueType: each catalogue type's preview,
// its push default deciding whether there is one (types that never push
// have none unless IncludeSilent), the words from the table.
func TestCTYPE010_PreviewEveryCatalogueType(t *testing.T) {
	w, reg := words(t), codec.NewRegistry()
	text, _ := reg.Encode(codec.TypeText, "the original")
	cases := []struct {
		name        string
		typ         codec.TypeID
		v           any
		push        bool
		title, body string
	}{
		{"text", codec.TypeText, "hello there", true, "", "hello there"},
		{"markdown", codec.TypeMarkdown, "**bold** move", true, "", "**bold** move"},
		{"reply", codec.TypeReply, &codec.Reply{Reference: "ab", Content: text}, true, "", "Replied: the original"},
		{"attachment", codec.TypeAttachment, &codec.Attachment{MimeType: "image/png", Filename: ptr("cat.png"), Data: []byte{1}}, true, "Attachment", "Sent cat.png"},
		{"attachment without a name", codec.TypeAttachment, &codec.Attachment{MimeType: "image/png", Data: []byte{1}}, true, "Attachment", "Sent an attachment"},
		{"remote attachment", codec.TypeRemoteAttachment, &codec.RemoteAttachment{URL: "https://x.example/a", ContentDigest: strings.Repeat("ab", 32),
			Secret: make([]byte, 32), Salt: make([]byte, 32), Nonce: make([]byte, 12), Scheme: "https://", Filename: ptr("doc.pdf")}, true, "Attachment", "Sent doc.pdf"},
		{"multi remote attachment", codec.TypeMultiRemoteAttachment, &ct.MultiRemoteAttachment{Attachments: []*ct.RemoteAttachmentInfo{
			remoteInfo("1"), remoteInfo("2"), remoteInfo("3")}}, true, "Attachments", "Sent 3 attachments"},
		{"transaction reference", codec.TypeTransactionReference, &codec.TransactionReference{NetworkID: "1", Reference: "0xabc",
			Metadata: &codec.TransactionMetadata{TransactionType: "transfer", Currency: "USDC", Amount: 12.5, Decimals: 6, FromAddress: "0xf", ToAddress: "0xt"}}, true, "Transaction", "Sent 12.5 USDC"},
		{"transaction reference, no metadata", codec.TypeTransactionReference, &codec.TransactionReference{NetworkID: "1", Reference: "0xabc"}, true, "Transaction", "Sent a transaction"},
		{"wallet send calls", codec.TypeWalletSendCalls, &codec.WalletSendCalls{Version: "1.0", ChainID: "0x2105", From: "0xf",
			Calls: []*codec.WalletCall{{Metadata: &codec.WalletCallMetadata{Description: "Pay 5 USDC", TransactionType: "transfer"}}}}, true, "Transaction request", "Pay 5 USDC"},
		{"actions", codec.TypeActions, &codec.Actions{ID: "m", Description: "Lunch?", Actions: []*codec.Action{{ID: "y", Label: "Yes"}}}, true, "Choose an action", "Lunch?"},
		{"intent", codec.TypeIntent, &codec.Intent{ID: "m", ActionID: "y"}, true, "", "Chose y"},
		{"reaction: never pushes", codec.TypeReaction, &ct.ReactionV2{Reference: "ab", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "👍", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE}, false, "", ""},
		{"read receipt: never pushes", codec.TypeReadReceipt, &codec.ReadReceipt{}, false, "", ""},
		{"delete message: never pushes", codec.TypeDeleteMessage, &ct.DeleteMessage{MessageId: "00ff"}, false, "", ""},
		{"leave request: never pushes", codec.TypeLeaveRequest, &ct.LeaveRequest{}, false, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := previewOf(t, w, reg, c.typ, c.v, Options{})
			checkPreview(t, p, c.push, c.title, c.body)
		})
	}
	// Group updates are decode-only (a commit transcript): built by hand.
	gu := &mc.EncodedContent{Type: codec.TypeGroupUpdated.Proto(), Content: mustMarshal(t, &mc.GroupUpdated{InitiatedByInboxId: "x"})}
	checkPreview(t, previewBytes(t, w, reg, mustMarshal(t, gu), Options{}), false, "", "")
	if p := previewBytes(t, w, reg, mustMarshal(t, gu), Options{IncludeSilent: true}); p.Push || p.Body != "Updated the group" {
		t.Errorf("group updated, silent included: %+v", p)
	}
}

func checkPreview(t *testing.T, p Preview, push bool, title, body string) {
	t.Helper()
	if p.Push != push || p.Title != title || p.Body != body || p.Truncated || p.FromFallback {
		t.Errorf("got %+v; want push %v, title %q, body %q", p, push, title, body)
	}
}

func remoteInfo(name string) *ct.RemoteAttachmentInfo {
	return &ct.RemoteAttachmentInfo{ContentDigest: strings.Repeat("cd", 32), Secret: make([]byte, 32), Nonce: make([]byte, 12),
		Salt: make([]byte, 32), Scheme: "https://", Url: "https://x.example/" + name, Filename: ptr(name)}
}

// TestSilentTypesInWords: IncludeSilent gives the types that never push
// their words, still with Push false: a reaction's emoji, its removal.
func TestSilentTypesInWords(t *testing.T) {
	w, reg := words(t), codec.NewRegistry()
	for _, c := range []struct {
		r    *ct.ReactionV2
		body string
	}{
		{&ct.ReactionV2{Reference: "ab", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "👍🏽", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE}, "Reacted 👍🏽 to a message"},
		{&ct.ReactionV2{Reference: "ab", Action: ct.ReactionAction_REACTION_ACTION_REMOVED, Content: ":party:", Schema: ct.ReactionSchema_REACTION_SCHEMA_CUSTOM}, "Removed a reaction :party:"},
	} {
		p := previewOf(t, w, reg, codec.TypeReaction, c.r, Options{IncludeSilent: true})
		if p.Push || p.Body != c.body {
			t.Errorf("reaction %v: %+v, want silent %q", c.r, p, c.body)
		}
	}
}

// TestReactionToAnUnknownType: a reaction's words are its own: a reaction
// to a message of a type unknown here, with a schema and an action this
// build does not know, or in the legacy 1.0 JSON form, says what it
// reacted with, silently; a reaction of a version unknown here says its
// fallback.
func TestReactionToAnUnknownType(t *testing.T) {
	w, reg := words(t), codec.NewRegistry()
	for name, c := range map[string]struct {
		ec   *mc.EncodedContent
		push bool
		body string
	}{
		"to a poll of example.com": {mustEncode(t, reg, codec.TypeReaction, &ct.ReactionV2{Reference: "poll-message-id", ReferenceInboxId: "inbox-b",
			Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "🗳️", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE}), false, "Reacted 🗳️ to a message"},
		// As another client may send it: this build's Encode refuses them.
		"schema and action unknown here": {&mc.EncodedContent{Type: codec.TypeReaction.Proto(), Content: mustMarshal(t, &ct.ReactionV2{Reference: "ab",
			Action: ct.ReactionAction(9), Content: "party_parrot", Schema: ct.ReactionSchema(7)})}, false, "Reacted party_parrot to a message"},
		"legacy 1.0 JSON": {&mc.EncodedContent{Type: codec.TypeLegacyReaction.Proto(),
			Content: []byte(`{"action":"removed","reference":"ab","schema":"custom","content":":tada:"}`)}, false, "Removed a reaction :tada:"},
		"a version unknown here": {&mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "xmtp.org", TypeId: "reaction", VersionMajor: 9},
			Content: []byte{1, 2, 3}, Fallback: ptr("Reacted 👍 to a poll")}, true, "Reacted 👍 to a poll"},
	} {
		p := previewBytes(t, w, reg, mustMarshal(t, c.ec), Options{IncludeSilent: true})
		if p.Push != c.push || p.Body != c.body {
			t.Errorf("%s: %+v, want push %v, %q", name, p, c.push, c.body)
		}
	}
}

// TestReplyPreviews: a reply says what it replies with, recursively, down
// to the nesting limit; a reply to a type unknown here says its fallback;
// a reply to a reaction says the reaction's words though reactions never
// push.
func TestReplyPreviews(t *testing.T) {
	w, reg := words(t), codec.NewRegistry()
	nested, _ := reg.Encode(codec.TypeText, "deepest")
	want := "deepest"
	for range reg.MaxNestingDepth() {
		var err error
		if nested, err = reg.Encode(codec.TypeReply, &codec.Reply{Reference: "ab", Content: nested}); err != nil {
			t.Fatal(err)
		}
		want = "Replied: " + want
	}
	p := previewBytes(t, w, reg, mustMarshal(t, nested), Options{MaxBodyBytes: MaxBudget})
	if !p.Push || p.Body != want {
		t.Errorf("replies at the nesting limit: %+v\nwant %q", p, want)
	}
	// One level more does not decode: the outermost envelope's fallback.
	deeper, _ := reg.Encode(codec.TypeReply, &codec.Reply{Reference: "ab", Content: nested})
	if p := previewBytes(t, w, reg, mustMarshal(t, deeper), Options{}); !p.FromFallback || p.Body != deeper.GetFallback() {
		t.Errorf("past the nesting limit: %+v, want the fallback %q", p, deeper.GetFallback())
	}

	poll := &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 1},
		Content: []byte("{}"), Fallback: ptr("A poll: lunch?")}
	reply, err := reg.Encode(codec.TypeReply, &codec.Reply{Reference: "ab", Content: poll})
	if err != nil {
		t.Fatal(err)
	}
	if p := previewBytes(t, w, reg, mustMarshal(t, reply), Options{}); p.Body != "Replied: A poll: lunch?" {
		t.Errorf("reply to an unknown type: %+v", p)
	}
	reaction, _ := reg.Encode(codec.TypeReaction, &ct.ReactionV2{Reference: "ab", Action: ct.ReactionAction_REACTION_ACTION_ADDED, Content: "🎉", Schema: ct.ReactionSchema_REACTION_SCHEMA_UNICODE})
	reply, _ = reg.Encode(codec.TypeReply, &codec.Reply{Reference: "ab", Content: reaction})
	if p := previewBytes(t, w, reg, mustMarshal(t, reply), Options{}); !p.Push || p.Body != "Replied: Reacted 🎉 to a message" {
		t.Errorf("reply to a reaction: %+v", p)
	}
}

// TestCTYPE009_UndecodablePreviewsItsFallback: an unknown type, and a
// catalogue type whose content does not decode, preview as their
// fallback; without one there is nothing to push.
func TestCTYPE009_UndecodablePreviewsItsFallback(t *testing.T) {
	w, reg := words(t), codec.NewRegistry()
	unknown := &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 1}, Content: []byte("x"), Fallback: ptr("A poll")}
	if p := previewBytes(t, w, reg, mustMarshal(t, unknown), Options{}); !p.Push || !p.FromFallback || p.Body != "A poll" {
		t.Errorf("unknown type: %+v", p)
	}
	badJSON := &mc.EncodedContent{Type: codec.TypeActions.Proto(), Content: []byte("{not json"), Fallback: ptr("Pick one: 1 or 2")}
	if p := previewBytes(t, w, reg, mustMarshal(t, badJSON), Options{}); !p.Push || !p.FromFallback || p.Body != "Pick one: 1 or 2" {
		t.Errorf("undecodable actions: %+v", p)
	}
	// A catalogue type that is silent (push false) keeps its silence when
	// its content does not decode: its fallback shows only when silent
	// types are asked for, and then does not push.
	badUpdate := &mc.EncodedContent{Type: codec.TypeGroupUpdated.Proto(), Content: []byte{0xff, 0xff}, Fallback: ptr("The group changed")}
	if p := previewBytes(t, w, reg, mustMarshal(t, badUpdate), Options{}); p.Push || p.Body != "" {
		t.Errorf("undecodable silent type: %+v, want nothing", p)
	}
	if p := previewBytes(t, w, reg, mustMarshal(t, badUpdate), Options{IncludeSilent: true}); p.Push || p.Body != "The group changed" {
		t.Errorf("undecodable silent type, silent asked for: %+v, want its fallback, not pushed", p)
	}
	unknown.Fallback = nil
	if p := previewBytes(t, w, reg, mustMarshal(t, unknown), Options{}); p.Push || p.Body != "" {
		t.Errorf("no fallback: %+v, want nothing to push", p)
	}
	if p := previewBytes(t, w, reg, []byte{0xff, 0xff}, Options{}); p.Push || p.Body != "" {
		t.Errorf("malformed envelope: %+v", p)
	}
}

// TestCutOnGraphemes: text of exactly the budget is whole; one grapheme
// over is cut before that grapheme with an ellipsis, and the result is
// within the budget; a cluster (an emoji with a skin tone, a family, a
// letter with combining marks), a right-to-left script and an escape
// are never split.
func TestCutOnGraphemes(t *testing.T) {
	for _, c := range []struct {
		name, unit string
	}{
		{"ascii", "a"},
		{"emoji with a skin tone", "👍🏽"},
		{"family (ZWJ sequence)", "👨‍👩‍👧‍👦"},
		{"combining marks", "e\u0301\u0323"},
		{"Arabic (RTL) with a kasra", "بِ"},
		{"Hebrew with points", "שָׁ"},
		{"an escaped quote", `"`},
		{"a control character", "\x01"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cost := jsonCost(c.unit)
			budget := 40 * cost
			exact := strings.Repeat(c.unit, 40)
			if got, cut := Cut(exact, budget); cut || got != exact {
				t.Errorf("exactly the budget: cut %v, %q", cut, got)
			}
			over := exact + c.unit
			got, cut := Cut(over, budget)
			if !cut || !strings.HasSuffix(got, ellipsis) {
				t.Fatalf("one over: cut %v, %q", cut, got)
			}
			kept := strings.TrimSuffix(got, ellipsis)
			if strings.Count(kept, c.unit)*len(c.unit) != len(kept) {
				t.Errorf("cut inside a cluster: %q", kept)
			}
			if jsonCost(got) > budget || !utf8.ValidString(got) {
				t.Errorf("cut to %d bytes as JSON, over the budget %d (or invalid UTF-8)", jsonCost(got), budget)
			}
		})
	}
	if got, cut := Cut("abc", 2); !cut || got != "" {
		t.Errorf("a budget smaller than the ellipsis: %q", got)
	}
}

// TestPreviewBudgets: the body is cut to the caller's budget and marked;
// the default is DefaultMaxBodyBytes.
func TestPreviewBudgets(t *testing.T) {
	w, reg := words(t), codec.NewRegistry()
	long := strings.Repeat("ab ", 1000)
	p := previewOf(t, w, reg, codec.TypeText, long, Options{})
	if !p.Truncated || jsonCost(p.Body) > DefaultMaxBodyBytes || !strings.HasSuffix(p.Body, ellipsis) {
		t.Errorf("default budget: %d bytes, truncated %v", jsonCost(p.Body), p.Truncated)
	}
	p = previewOf(t, w, reg, codec.TypeText, long, Options{MaxBodyBytes: 50})
	if !p.Truncated || jsonCost(p.Body) > 50 {
		t.Errorf("budget 50: %d bytes", jsonCost(p.Body))
	}
}

// TestTemplateFileReplacesWords: an operator's file replaces the entries
// it gives (in the default locale and others), keeps the rest, adds a
// locale, and a locale falls back to its language, then to the default;
// a file naming an unknown entry or field is refused.
func TestTemplateFileReplacesWords(t *testing.T) {
	w, err := Load([]byte(`
locales:
  en:
    attachment: {title: "File", body: "📎 {{.Name}}"}
  fr:
    reply: {body: "A répondu : {{.Inner}}"}
    text: {body: "{{.Text}}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	reg := codec.NewRegistry()
	att := &codec.Attachment{MimeType: "image/png", Filename: ptr("cat.png"), Data: []byte{1}}
	if p := previewOf(t, w, reg, codec.TypeAttachment, att, Options{}); p.Title != "File" || p.Body != "📎 cat.png" {
		t.Errorf("replaced entry: %+v", p)
	}
	if p := previewOf(t, w, reg, codec.TypeIntent, &codec.Intent{ID: "m", ActionID: "y"}, Options{}); p.Body != "Chose y" {
		t.Errorf("kept entry: %+v", p)
	}
	text, _ := reg.Encode(codec.TypeText, "oui")
	if p := previewOf(t, w, reg, codec.TypeReply, &codec.Reply{Reference: "ab", Content: text}, Options{Locale: "fr-CA"}); p.Body != "A répondu : oui" {
		t.Errorf("fr-CA falls back to fr: %+v", p)
	}
	if p := previewOf(t, w, reg, codec.TypeAttachment, att, Options{Locale: "fr"}); p.Body != "📎 cat.png" {
		t.Errorf("an entry fr lacks falls back to the default locale: %+v", p)
	}
	if p := previewOf(t, w, reg, codec.TypeAttachment, att, Options{Locale: "es-MX"}); p.Body != "Envió cat.png" {
		t.Errorf("built-in es: %+v", p)
	}
	for name, file := range map[string]string{
		"unknown entry": "locales: {en: {poll: {body: x}}}",
		"unknown field": "locales: {en: {text: {body: '{{.Secret}}'}}}",
		"unknown part":  "locales: {en: {text: {subtitle: x}}}",
		"bad template":  "locales: {en: {text: {body: '{{.Text'}}}",
		"unknown key":   "colour: red",
		"empty default": "default_locale: xx",
	} {
		if _, err := Load([]byte(file)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// TestBuiltInWordsLoad: the embedded table loads, every entry the
// previews use is in its default locale, and every locale's resolved
// table has every entry.
func TestBuiltInWordsLoad(t *testing.T) {
	w := words(t)
	for _, loc := range []string{"", "en", "es", "es-MX", "ES_mx", "xx"} {
		for k, name := range keys {
			if w.For(loc).entries[k] == nil {
				t.Errorf("%q: %s: no built-in words", loc, name)
			}
		}
	}
	if w.For("es-MX") != w.For("es") || w.For("xx") != w.For("") {
		t.Error("a region falls back to its language, an unknown locale to the default")
	}
}

// TestSimplePathIsTheTemplate: the built-in entries render through the
// parts path, and it writes what text/template writes for each.
func TestSimplePathIsTheTemplate(t *testing.T) {
	w := words(t)
	f := fields{Text: "t", Inner: "i", Emoji: "😀", Name: "n", Amount: "1.5", Currency: "USDC", Description: "d", ActionID: "a", Fallback: "fb", Count: 3}
	for loc, m := range w.locales {
		for k, e := range m {
			for _, c := range []*compiled{e.title, e.body} {
				if c == nil {
					continue
				}
				if c.parts == nil {
					t.Errorf("%s.%s: a built-in entry takes the slow path", loc, k)
					continue
				}
				slow := &compiled{t: c.t}
				if got, want := execute(c, &f), execute(slow, &f); got != want {
					t.Errorf("%s.%s: parts write %q, the template %q", loc, k, got, want)
				}
			}
		}
	}
	// A field's index is its place in fields.
	for name, i := range fieldIndex {
		v := reflect.ValueOf(f).Field(i)
		if fmt.Sprint(v.Interface()) != f.value(i) {
			t.Errorf("field %s: value(%d) = %q", name, i, f.value(i))
		}
	}
}

func mustMarshalF(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return b
}

// BenchmarkOfText200 is one preview of a page's message, the words and the
// cut: what DecodeBatch adds per message besides the bytes of the answer.
func BenchmarkOfText200(b *testing.B) {
	reg := codec.NewRegistry()
	words, err := Defaults()
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5)[:200]
	ec, err := reg.Encode(codec.TypeText, text)
	if err != nil {
		b.Fatal(err)
	}
	d := codec.Decoded{Type: codec.TypeText, Value: text}
	desc, table := describe(reg, ec), words.For("")
	b.ReportAllocs()
	for b.Loop() {
		if p := table.Of(reg, desc, d, ec, nil, Options{}); p.Body != strings.TrimSpace(text) {
			b.Fatal(p.Body)
		}
	}
}

// TestPlainPrefixMatchesBytewise holds the word-at-a-time scan to the
// byte-at-a-time one: every byte value at every position of strings
// across a word boundary, and boundary values beside each other.
func TestPlainPrefixMatchesBytewise(t *testing.T) {
	bytewise := func(s string) int {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				return i
			}
		}
		return len(s)
	}
	base := []byte(strings.Repeat("abcdefgh", 3))
	for n := 0; n <= len(base); n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := append([]byte(nil), base[:n]...)
				b[pos] = byte(c)
				if got, want := plainPrefix(string(b)), bytewise(string(b)); got != want {
					t.Fatalf("plainPrefix(%q) = %d, want %d", b, got, want)
				}
			}
		}
	}
	// Neighbours of the tested values, whose borrows could mislead.
	for _, s := range []string{" !\x1f#[]\x7f~", "\x20\x20\x20\x20\x20\x20\x20\x21", "!#!#!#!#[]", "\x1f!!!!!!!", "]]]]]]]]\x5c"} {
		if got, want := plainPrefix(s), bytewise(s); got != want {
			t.Fatalf("plainPrefix(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestPreviewCostsItsBudgetNotItsContent: a megabyte in any field a
// template writes among other words (a reply's text nested to the limit,
// a file name, an emoji, a chain id, an unknown type's fallback) gives a
// preview within its budget, marked cut, whose making allocates in
// proportion to the budget and the nesting, not to the megabyte, and is
// the cut of the whole.
func TestPreviewCostsItsBudgetNotItsContent(t *testing.T) {
	w, reg := words(t), codec.NewRegistry()
	huge := strings.Repeat("megabyte ", 1<<20/9)
	nested := mustEncode(t, reg, codec.TypeText, huge)
	for range reg.MaxNestingDepth() {
		nested = mustEncode(t, reg, codec.TypeReply, &codec.Reply{Reference: "ab", Content: nested})
	}
	unknown := &mc.EncodedContent{Type: &mc.ContentTypeId{AuthorityId: "example.com", TypeId: "poll", VersionMajor: 1}, Content: []byte("x"), Fallback: ptr(huge)}
	for name, c := range map[string]struct {
		ec    *mc.EncodedContent
		whole string // what a cut of the whole gives, "" to skip
	}{
		"reply to a megabyte":         {mustEncode(t, reg, codec.TypeReply, &codec.Reply{Reference: "ab", Content: mustEncode(t, reg, codec.TypeText, huge)}), "Replied: " + huge},
		"replies nested to the limit": {nested, ""},
		"attachment named a megabyte": {mustEncode(t, reg, codec.TypeAttachment, &codec.Attachment{MimeType: "text/plain", Filename: ptr(huge), Data: []byte{1}}), "Sent " + huge},
		"reaction of a megabyte": {mustEncode(t, reg, codec.TypeReaction, &ct.ReactionV2{Reference: "ab", Action: ct.ReactionAction_REACTION_ACTION_ADDED,
			Content: huge, Schema: ct.ReactionSchema_REACTION_SCHEMA_CUSTOM}), "Reacted " + huge + " to a message"},
		"chain id of a megabyte": {mustEncode(t, reg, codec.TypeWalletSendCalls, &codec.WalletSendCalls{Version: "1.0", ChainID: huge, From: "0xf",
			Calls: []*codec.WalletCall{{To: ptr("0x1")}}}), ""},
		"fallback of a megabyte": {unknown, huge},
	} {
		t.Run(name, func(t *testing.T) {
			d, ec, err := reg.Decode(mustMarshal(t, c.ec), codec.DecodeOptions{})
			desc := describe(reg, ec)
			o := Options{IncludeSilent: true}
			var p Preview
			allocated := allocatedBytes(func() { p = w.Of(reg, desc, d, ec, err, o) })
			if !p.Truncated || p.Body == "" || jsonCost(p.Body) > DefaultMaxBodyBytes || jsonCost(p.Title) > DefaultMaxTitleBytes {
				t.Errorf("preview: %d bytes as JSON, truncated %v", jsonCost(p.Body), p.Truncated)
			}
			if c.whole != "" {
				if want, _ := Cut(c.whole, DefaultMaxBodyBytes); p.Body != want {
					t.Errorf("body %q…, want the cut of the whole %q…", p.Body[:40], want[:40])
				}
			}
			// The nesting limit's levels, each a budget and its words.
			if max := uint64(reg.MaxNestingDepth()+1) * 4 * DefaultMaxBodyBytes; allocated > max {
				t.Errorf("a preview of a megabyte allocated %d bytes, over %d", allocated, max)
			}
		})
	}
}

// allocatedBytes is what f allocates on the heap.
func allocatedBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestCutTrimsSpaceBeforeTheEllipsis: a cut that lands after white space
// (space, tab, newline, carriage return) drops it before the ellipsis, in
// a run of plain ASCII and past one alike; a cut inside a word keeps it.
func TestCutTrimsSpaceBeforeTheEllipsis(t *testing.T) {
	room := func(n int) int { return n + jsonCost(ellipsis) }
	for _, c := range []struct {
		s      string
		budget int
		want   string
	}{
		{"hello world again", room(6), "hello" + ellipsis},
		{"hello   world", room(8), "hello" + ellipsis},
		{"hello worlds", room(8), "hello wo" + ellipsis},
		{"tab\there and more", room(4), "tab" + ellipsis},
		{"é then words", room(7), "é then" + ellipsis},
		{"é then\nwords", room(8) + 1, "é then" + ellipsis}, // \n costs two as JSON
		{"é then\rwords", room(8) + 1, "é then" + ellipsis},
	} {
		if got, cut := Cut(c.s, c.budget); !cut || got != c.want {
			t.Errorf("Cut(%q, %d) = %q, %v; want %q", c.s, c.budget, got, cut, c.want)
		}
	}
}

// TestPrefixKeepsPastTheLimit: prefix keeps a string up to the limit and
// a rune's bytes more whole, and cuts a longer one past the limit on a
// rune boundary.
func TestPrefixKeepsPastTheLimit(t *testing.T) {
	if got := prefix("abcdefgh", 4); got != "abcdefgh" {
		t.Errorf("limit + 4 bytes: %q", got)
	}
	if got := prefix("abcdefghi", 4); got != "abcdefgh" {
		t.Errorf("limit + 5 bytes: %q", got)
	}
	if got := prefix("abcdefg€hij", 4); got != "abcdefg" {
		t.Errorf("a rune across the cut: %q", got)
	}
	if got := amount(1.25); got != "1.25" {
		t.Errorf("amount(1.25) = %q", got)
	}
	if got := amount(100000); got != "100000" {
		t.Errorf("amount(100000) = %q", got)
	}
}
