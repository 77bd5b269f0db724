// Package preview turns decoded content into what a push notification
// shows: a plain-text body, and a title where the type has one, in the
// caller's locale, cut on a grapheme boundary to a byte budget, with the
// spec's push default (CTYPE-010) saying whether to push at all.
//
// The words are a table (words.yaml, embedded; an operator's file replaces
// entries of it), not strings in code. The package is pure: decoded values
// in, text out.
package preview

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"

	mc "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents"
	ct "github.com/contentbackup/contentbackup/api/xmtp/mls/message_contents/content_types"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// Budgets by default, in bytes of the text as a JSON string carries it
// (escapes included): with room for the rest of an APNs or FCM payload,
// both 4 KB.
const (
	DefaultMaxBodyBytes  = 1000
	DefaultMaxTitleBytes = 100
	// MaxBudget is the largest budget a caller may ask for: a payload's
	// whole 4 KB.
	MaxBudget = 4096
)

// ellipsis marks a cut text.
const ellipsis = "…"

// Options are a caller's: the locale (BCP 47; "pt-BR" falls back to "pt",
// then to the table's default), the budgets (0: the defaults), and
// whether types that never push get words all the same (for an in-app
// list rather than a notification).
type Options struct {
	Locale                      string
	MaxBodyBytes, MaxTitleBytes int
	IncludeSilent               bool
}

// Preview is what a notification of one message shows.
type Preview struct {
	// Push is whether to notify at all: the type's push default, and
	// false when there is nothing to show.
	Push        bool
	Title, Body string
	// Truncated: the title or the body was cut to its budget.
	Truncated bool
	// FromFallback: the words are the envelope's fallback text, the type
	// being unknown here or its content undecodable.
	FromFallback bool
}

// fields are what the templates may read.
type fields struct {
	Text, Inner, Emoji, Name, Amount, Currency, Description, ActionID, Fallback string
	Count                                                                       int
	// innerCut: Inner was cut where it was made (a reply's content).
	innerCut bool
}

// Of previews one decode outcome: d and ec as reg.Decode returned them,
// err its error (nil when d is decoded), and desc the description of ec's
// type (Describe; the zero Description when ec is nil), which the caller
// has already looked up for the rest of its answer.
func (w *Words) Of(reg *codec.Registry, desc codec.Description, d codec.Decoded, ec *mc.EncodedContent, err error, o Options) Preview {
	return w.For(o.Locale).Of(reg, desc, d, ec, err, o)
}

// Of is Words.Of in the table's locale (o.Locale is not read): a call
// previewing many messages resolves its locale once.
func (w *Table) Of(reg *codec.Registry, desc codec.Description, d codec.Decoded, ec *mc.EncodedContent, err error, o Options) Preview {
	maxBody, maxTitle := budget(o.MaxBodyBytes, DefaultMaxBodyBytes), budget(o.MaxTitleBytes, DefaultMaxTitleBytes)
	p := w.words(reg, desc, d, ec, err, o.IncludeSilent, max(maxBody, maxTitle))
	var cut bool
	p.Body, cut = Cut(p.Body, maxBody)
	p.Truncated = p.Truncated || cut
	p.Title, cut = Cut(p.Title, maxTitle)
	p.Truncated = p.Truncated || cut
	if p.Body == "" && p.Title == "" {
		p.Push = false
	}
	return p
}

func budget(n, def int) int {
	if n <= 0 {
		return def
	}
	return min(n, MaxBudget)
}

// words renders the preview before its cut to the budgets; desc is ec's
// type's (a decoded value's type is its envelope's). A field a template
// writes among other words is first cut to limit, the larger budget: a
// preview costs memory in proportion to its budget and its nesting, not
// to the content (a reply to a megabyte of text, nested to the limit,
// would otherwise copy the megabyte once a level), and what the final cut
// keeps is the same.
func (w *Table) words(reg *codec.Registry, desc codec.Description, d codec.Decoded, ec *mc.EncodedContent, err error, silent bool, limit int) Preview {
	fallback := ""
	if ec != nil {
		fallback = ec.GetFallback()
	}
	if err != nil || d.Value == nil {
		// Unknown here, or undecodable: the sender's own fallback, which
		// exists so that such content can still be shown (CTYPE-009).
		if fallback == "" {
			return Preview{}
		}
		push := true
		if ec != nil && desc.PushKnown {
			push = desc.Push
		}
		if !push && !silent {
			return Preview{}
		}
		p := w.render(keyFallback, &fields{Fallback: fallback}, limit)
		p.Push, p.FromFallback = push, true
		return p
	}
	push := desc.Push || !desc.PushKnown
	if !push && !silent {
		return Preview{}
	}
	var f fields
	k, ok := w.describe(reg, d, &f, limit)
	if !ok {
		// An application codec's value: its fallback, if any.
		if fallback == "" {
			return Preview{}
		}
		k, f = keyFallback, fields{Fallback: fallback}
	}
	p := w.render(k, &f, limit)
	p.Push = push
	return p
}

// describe picks the words for a decoded catalogue value, and fills f
// with what they read.
func (w *Table) describe(reg *codec.Registry, d codec.Decoded, f *fields, limit int) (key, bool) {
	switch v := d.Value.(type) {
	case string: // text and markdown
		f.Text = v
		if d.Type.Key() == codec.TypeMarkdown.Key() {
			return keyMarkdown, true
		}
		return keyText, true
	case *codec.Reply:
		// The replied content is cut once, to what the reply's own words
		// leave of the limit, so the reply's words around it never need
		// another cut: a reply nested to the limit cuts its text once,
		// not once a level (which cost 26-34 times a DecodeBatch's CPU).
		innerLimit := limit
		if c := w.fixedCost(keyReply); c >= 0 && c < limit {
			innerLimit = limit - c
		}
		inner, cut := w.inner(reg, v, innerLimit)
		if len(inner) > innerLimit {
			var again bool
			inner, again = Cut(inner, innerLimit)
			cut = cut || again
		}
		f.Inner, f.innerCut = inner, cut
		return keyReply, true
	case *ct.ReactionV2:
		f.Emoji = v.GetContent()
		if v.GetAction() == ct.ReactionAction_REACTION_ACTION_REMOVED {
			return keyReactionRemoved, true
		}
		return keyReaction, true
	case *codec.Attachment:
		return attachment(v.Filename, f)
	case *codec.RemoteAttachment:
		return attachment(v.Filename, f)
	case *ct.MultiRemoteAttachment:
		if n := len(v.GetAttachments()); n != 1 {
			f.Count = n
			return keyAttachments, true
		}
		return attachment(v.GetAttachments()[0].Filename, f)
	case *codec.TransactionReference:
		if m := v.Metadata; m != nil && m.Currency != "" {
			f.Amount, f.Currency = amount(m.Amount), m.Currency
			return keyTransactionAmount, true
		}
		return keyTransaction, true
	case *codec.WalletSendCalls:
		for _, c := range v.Calls {
			if c.Metadata != nil && c.Metadata.Description != "" {
				f.Description = c.Metadata.Description
				return keyTransactionRequest, true
			}
		}
		f.Description = "Chain " + prefix(v.ChainID, limit)
		return keyTransactionRequest, true
	case *codec.Actions:
		f.Description = v.Description
		return keyActions, true
	case *codec.Intent:
		f.ActionID = v.ActionID
		return keyIntent, true
	case *mc.GroupUpdated:
		return keyGroupUpdated, true
	case *mc.GroupMembershipChanges:
		return keyMembershipChanged, true
	case *ct.LeaveRequest:
		return keyLeaveRequest, true
	case *ct.DeleteMessage:
		return keyDeleteMessage, true
	case *ct.EditMessage:
		return keyEditMessage, true
	case *codec.ReadReceipt:
		return keyReadReceipt, true
	}
	return 0, false
}

// inner is a reply's replied content in words: its own preview, silent
// types included (a reply to a reaction still says something), or the
// nested envelope's fallback when it did not decode. The nesting limit
// held when the reply decoded, so this recursion is bounded by it.
func (w *Table) inner(reg *codec.Registry, r *codec.Reply, limit int) (string, bool) {
	var p Preview
	var desc codec.Description
	if r.Content != nil {
		desc = reg.Describe(codec.TypeIDOf(r.Content.GetType()))
	}
	if r.NestedUndecoded != nil || r.Nested.Value == nil {
		p = w.words(reg, desc, codec.Decoded{}, r.Content, r.NestedUndecoded, true, limit)
	} else {
		p = w.words(reg, desc, r.Nested, r.Content, nil, true, limit)
	}
	return p.Body, p.Truncated
}

// fixedCost is what k's words cost besides their fields, as JSON: the
// most of its title's and its body's; -1 when a template is not plain
// text and fields (a locale's own text/template), whose cost is unknown.
func (w *Table) fixedCost(k key) int {
	e := w.entries[k]
	if e == nil {
		return 0
	}
	cost := 0
	for _, c := range []*compiled{e.title, e.body} {
		if c == nil {
			continue
		}
		if c.parts == nil {
			return -1
		}
		n := 0
		for _, p := range c.parts {
			if p.field < 0 {
				n += jsonCost(p.text)
			}
		}
		cost = max(cost, n)
	}
	return cost
}

func attachment(name *string, f *fields) (key, bool) {
	if name == nil || *name == "" {
		return keyAttachmentUnnamed, true
	}
	f.Name = *name
	return keyAttachment, true
}

func amount(a float64) string { return strconv.FormatFloat(a, 'f', -1, 64) }

// prefix is s, or when longer than limit, its first limit bytes or a few
// more, to a rune boundary: still longer than limit, so that what holds
// it is cut, and marked so, as the whole would have been.
func prefix(s string, limit int) string {
	if len(s) <= limit+utf8.UTFMax {
		return s
	}
	end := limit + utf8.UTFMax
	for end > limit && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}

// render runs the table's template for k, with each field over limit cut
// to it first (Truncated says so) unless the template is that field
// alone, which costs no copy and is cut by Of.
func (w *Table) render(k key, f *fields, limit int) Preview {
	e := w.entries[k]
	if e == nil {
		return Preview{}
	}
	var p Preview
	if !e.title.single() || !e.body.single() {
		p.Truncated = f.bound(limit)
	}
	p.Truncated = p.Truncated || f.innerCut
	p.Title = execute(e.title, f)
	p.Body = execute(e.body, f)
	return p
}

// single: the template writes one field and nothing else (or nothing).
func (c *compiled) single() bool {
	return c == nil || len(c.parts) == 1 && c.parts[0].field >= 0
}

// bound cuts each text field over limit to it (Cut), and reports whether
// it cut one.
func (f *fields) bound(limit int) bool {
	cut := false
	for _, s := range []*string{&f.Text, &f.Inner, &f.Emoji, &f.Name, &f.Amount, &f.Currency, &f.Description, &f.ActionID, &f.Fallback} {
		if len(*s) > limit {
			*s, _ = Cut(*s, limit)
			cut = true
		}
	}
	return cut
}

func execute(c *compiled, f *fields) string {
	switch {
	case c == nil:
		return ""
	case c.parts != nil:
		if c.single() {
			return strings.TrimSpace(f.value(c.parts[0].field)) // "{{.Text}}": no copy
		}
		var b strings.Builder
		for _, p := range c.parts {
			if p.field < 0 {
				b.WriteString(p.text)
			} else {
				b.WriteString(f.value(p.field))
			}
		}
		return strings.TrimSpace(b.String())
	}
	var b bytes.Buffer
	if err := c.t.Execute(&b, *f); err != nil { // a copy: f stays on its caller's stack
		return "" // checked at load against these fields: cannot happen
	}
	return strings.TrimSpace(b.String())
}

// value is field i of f (fieldIndex) as text, as text/template prints it;
// a switch, not reflection, to allocate nothing.
func (f *fields) value(i int) string {
	switch i {
	case 0:
		return f.Text
	case 1:
		return f.Inner
	case 2:
		return f.Emoji
	case 3:
		return f.Name
	case 4:
		return f.Amount
	case 5:
		return f.Currency
	case 6:
		return f.Description
	case 7:
		return f.ActionID
	case 8:
		return f.Fallback
	case 9:
		return strconv.Itoa(f.Count)
	}
	return ""
}

// Cut returns s cut to at most budget bytes as a JSON string carries it
// (escapes counted, quotes not), on a grapheme cluster boundary, with an
// ellipsis in the budget when it was cut: never inside a character, an
// escape, or a cluster (an emoji with its modifiers, a letter with its
// combining marks).
func Cut(s string, budget int) (string, bool) {
	// Every byte costs at least one: a text longer than its budget is cut
	// without measuring it whole, so a cut costs its budget, not the text.
	if len(s) <= budget && jsonCost(s) <= budget {
		return s, false
	}
	room := budget - jsonCost(ellipsis)
	if room < 0 {
		return "", true
	}
	if room < plainPrefix(s) {
		// Inside a run of printable ASCII every position is a cluster
		// boundary (two such characters never join) and each byte costs
		// one: the cut is at room, without walking the clusters before it.
		return strings.TrimRightFunc(s[:room], isSpace) + ellipsis, true
	}
	used, end := 0, 0
	g := uniseg.NewGraphemes(s)
	for g.Next() {
		c := jsonCost(g.Str())
		if used+c > room {
			break
		}
		used += c
		_, end = g.Positions()
	}
	return strings.TrimRightFunc(s[:end], isSpace) + ellipsis, true
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// jsonCost is s's length inside a JSON string as encoding/json writes it
// without HTML escaping: \" \\ \n \r \t take two bytes, other control
// characters (\b and \f too, as encoders before Go 1.22 wrote them: the
// larger count), U+2028, U+2029 and each invalid byte six (\u00XX,
// \u2028, \ufffd), every other rune its UTF-8 length.
func jsonCost(s string) int {
	// Most text is printable ASCII, which costs its length.
	n := plainPrefix(s)
	for i := n; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			n += 2
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// plainPrefix is the length of s's leading run of bytes that a JSON string
// carries as themselves: printable ASCII other than '"' and '\\'. It reads
// eight bytes at a time (a preview of every message of a page measures
// its text once): a word holds none of the others when none of its bytes
// has the high bit, is below 0x20, or equals '"' or '\\' (the tests of
// "Bit Twiddling Hacks", exact for a yes-or-no answer).
func plainPrefix(s string) int {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := s[i : i+8] // one load of eight bytes, without bounds checks
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		if (x|(x-ones*0x20)|((quote-ones)&^quote)|((backslash-ones)&^backslash))&high != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return i
		}
	}
	return len(s)
}
