package preview

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rivo/uniseg"

	"github.com/contentbackup/contentbackup/internal/codec"
)

// FuzzCut: whatever the text and budget, the cut fits the budget as JSON,
// is a prefix of the text (before the ellipsis) ending on a grapheme
// boundary, and keeps valid UTF-8 valid.
func FuzzCut(f *testing.F) {
	for _, s := range []string{"hello", "👍🏽👍🏽👍🏽", "e\u0301e\u0301", "مرحبا بالعالم", `"\"\\`, "\x01\x02", "a\u2028b", "\xff\xfe"} {
		f.Add(s, 5)
	}
	f.Add(strings.Repeat("ascii ", 200)+"e\u0301", 1000)
	f.Add("abcde\u0301fgh", 7)
	f.Add("abcd\r\nefgh", 6)
	f.Fuzz(func(t *testing.T, s string, budget int) {
		budget = budget % (MaxBudget + 1)
		if budget < 0 {
			budget = -budget
		}
		got, cut := Cut(s, budget)
		if jsonCost(got) > budget {
			t.Fatalf("Cut(%q, %d) = %q: %d bytes as JSON", s, budget, got, jsonCost(got))
		}
		if !cut {
			if got != s {
				t.Fatalf("uncut but changed: %q", got)
			}
			return
		}
		kept := strings.TrimSuffix(got, ellipsis)
		if !strings.HasPrefix(s, kept) {
			t.Fatalf("Cut(%q) kept %q, not a prefix", s, kept)
		}
		if want := cutByClusters(s, budget); got != want {
			t.Fatalf("Cut(%q, %d) = %q; the cluster walk cuts %q", s, budget, got, want)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Cut(%q) made invalid UTF-8: %q", s, got)
		}
	})
}

// cutByClusters is Cut's rule spelled out, cluster by cluster from the
// start, with no fast path: what Cut must equal.
func cutByClusters(s string, budget int) string {
	room := budget - jsonCost(ellipsis)
	if room < 0 {
		return ""
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
	return strings.TrimRightFunc(s[:end], isSpace) + ellipsis
}

// FuzzPreview: any bytes preview without panicking, within the budgets.
func FuzzPreview(f *testing.F) {
	reg := codec.NewRegistry()
	for _, v := range []struct {
		t codec.TypeID
		v any
	}{{codec.TypeText, "hi"}, {codec.TypeIntent, &codec.Intent{ID: "a", ActionID: "b"}}} {
		ec, _ := reg.Encode(v.t, v.v)
		f.Add(mustMarshalF(ec))
	}
	f.Add([]byte{0xff})
	w, err := Defaults()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, ec, err := reg.Decode(b, codec.DecodeOptions{})
		p := w.Of(reg, describe(reg, ec), d, ec, err, Options{MaxBodyBytes: 64, MaxTitleBytes: 16, IncludeSilent: true})
		if jsonCost(p.Body) > 64 || jsonCost(p.Title) > 16 {
			t.Fatalf("preview over budget: %+v", p)
		}
	})
}

// FuzzJSONCost holds jsonCost to encoding/json: s's length as a JSON
// string, quotes left out, without HTML escaping.
func FuzzJSONCost(f *testing.F) {
	for _, s := range []string{"", "plain ascii text", "quote\" and \\ back", "tab\tnew\nline", "\x00\x1f", "é👍🏽\u2028\u2029", "\xff\xfe", "\b\f", strings.Repeat("abcdefg\"", 5)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		// Less the quotes and the newline; \b and \f are counted as
		// \u0008 and \u000c, which earlier encoders wrote.
		want := b.Len() - 3 + 4*strings.Count(s, "\b") + 4*strings.Count(s, "\f")
		if jsonCost(s) != want {
			t.Fatalf("jsonCost(%q) = %d, encoding/json writes %d", s, jsonCost(s), want)
		}
	})
}
