package preview

import (
	"bytes"
	_ "embed"
	"fmt"
	"reflect"
	"strings"
	"text/template"
	"text/template/parse"

	"go.yaml.in/yaml/v3"
)

//go:embed words.yaml
var builtIn []byte

// Words is the table of templates, per locale and key.
type Words struct {
	defaultLocale string
	locales       map[string]map[string]*entry
	// tables are each locale's entries with its language's and the
	// default locale's filling its gaps: what For hands a call.
	tables map[string]*Table
}

// Table is the words of one locale, resolved for a call: its entries,
// then its language's, then the default locale's, by key, so that a
// preview of each message of a page looks nothing up by name.
type Table struct {
	entries [numKeys]*entry
}

// For resolves a caller's locale (BCP 47, any case, '_' or '-': "pt_BR"
// falls back to "pt", then to the default locale) once for a call.
func (w *Words) For(locale string) *Table {
	if locale == "" { // most callers: no work
		return w.tables[w.defaultLocale]
	}
	locale = strings.ToLower(strings.ReplaceAll(locale, "_", "-"))
	if t, ok := w.tables[locale]; ok {
		return t
	}
	if t, ok := w.tables[language(locale)]; ok {
		return t
	}
	return w.tables[w.defaultLocale]
}

func language(locale string) string {
	lang, _, _ := strings.Cut(locale, "-")
	return lang
}

// resolve builds the tables: for each locale, each key from the locale,
// its language or the default locale, in that order.
func (w *Words) resolve() {
	w.tables = map[string]*Table{}
	for loc := range w.locales {
		t := &Table{}
		for k, name := range keys {
			for _, from := range []string{loc, language(loc), w.defaultLocale} {
				if e, ok := w.locales[from][name]; ok {
					t.entries[k] = e
					break
				}
			}
		}
		w.tables[loc] = t
	}
}

type entry struct{ title, body *compiled }

// compiled is a template, and when it is only literal text and fields
// (as the built-in ones are), those parts, which render without
// text/template's reflection: a preview per message of a page is on the
// DecodeBatch path.
type compiled struct {
	t     *template.Template
	parts []part // nil: execute t
}

// part is literal text, or the field at index field of fields.
type part struct {
	text  string
	field int // -1 for text
}

// key is an entry of the table: every word the previews use.
type key int

const (
	keyText key = iota
	keyMarkdown
	keyReply
	keyReaction
	keyReactionRemoved
	keyAttachment
	keyAttachmentUnnamed
	keyAttachments
	keyTransaction
	keyTransactionAmount
	keyTransactionRequest
	keyActions
	keyIntent
	keyGroupUpdated
	keyMembershipChanged
	keyLeaveRequest
	keyDeleteMessage
	keyEditMessage
	keyReadReceipt
	keyFallback
	numKeys
)

// keys are the entries' names in a words file, by key.
var keys = [numKeys]string{"text", "markdown", "reply", "reaction", "reaction_removed", "attachment", "attachment_unnamed",
	"attachments", "transaction", "transaction_amount", "transaction_request", "actions", "intent", "group_updated",
	"membership_changed", "leave_request", "delete_message", "edit_message", "read_receipt", "fallback"}

type file struct {
	DefaultLocale string                                  `yaml:"default_locale"`
	Locales       map[string]map[string]map[string]string `yaml:"locales"`
}

// Defaults is the built-in table. Its error is a build defect, which the
// tests catch.
func Defaults() (*Words, error) { return parseWords(builtIn, nil) }

// Load reads an operator's table over the built-in one: each entry it
// gives replaces that locale's and key's; an unknown key, a field no
// template may read, or a template that does not parse is refused,
// naming it.
func Load(b []byte) (*Words, error) {
	base, err := Defaults()
	if err != nil {
		return nil, err
	}
	return parseWords(b, base)
}

func parseWords(b []byte, base *Words) (*Words, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("preview words: %w", err)
	}
	w := &Words{defaultLocale: "en", locales: map[string]map[string]*entry{}}
	if base != nil {
		w.defaultLocale = base.defaultLocale
		for loc, m := range base.locales {
			w.locales[loc] = map[string]*entry{}
			for k, e := range m {
				w.locales[loc][k] = e
			}
		}
	}
	if f.DefaultLocale != "" {
		w.defaultLocale = strings.ToLower(f.DefaultLocale)
	}
	for loc, m := range f.Locales {
		loc = strings.ToLower(loc)
		if w.locales[loc] == nil {
			w.locales[loc] = map[string]*entry{}
		}
		for k, parts := range m {
			if !contains(keys[:], k) {
				return nil, fmt.Errorf("preview words: %s.%s: unknown entry (one of %s)", loc, k, strings.Join(keys[:], ", "))
			}
			e := &entry{}
			for part, text := range parts {
				t, err := compile(loc+"."+k+"."+part, text)
				if err != nil {
					return nil, err
				}
				switch part {
				case "title":
					e.title = t
				case "body":
					e.body = t
				default:
					return nil, fmt.Errorf("preview words: %s.%s.%s: an entry has a title and a body only", loc, k, part)
				}
			}
			w.locales[loc][k] = e
		}
	}
	if w.locales[w.defaultLocale] == nil {
		return nil, fmt.Errorf("preview words: the default locale %q has no entries", w.defaultLocale)
	}
	w.resolve()
	return w, nil
}

// compile parses a template and runs it once over every field, so a
// field no template may read is refused at load, not at a preview.
func compile(name, text string) (*compiled, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("preview words: %w", err)
	}
	if err := t.Execute(&bytes.Buffer{}, fields{}); err != nil {
		return nil, fmt.Errorf("preview words: %s: %w", name, err)
	}
	return &compiled{t: t, parts: simple(t)}, nil
}

// simple is t's parts when t holds only text and {{.Field}} actions.
func simple(t *template.Template) []part {
	var parts []part
	for _, n := range t.Tree.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			parts = append(parts, part{text: string(n.Text), field: -1})
		case *parse.ActionNode:
			if len(n.Pipe.Decl) != 0 || len(n.Pipe.Cmds) != 1 || len(n.Pipe.Cmds[0].Args) != 1 {
				return nil
			}
			f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode)
			if !ok || len(f.Ident) != 1 {
				return nil
			}
			i, ok := fieldIndex[f.Ident[0]]
			if !ok {
				return nil
			}
			parts = append(parts, part{field: i})
		default:
			return nil
		}
	}
	return parts
}

// fieldIndex is each field's index in fields.
var fieldIndex = func() map[string]int {
	m := map[string]int{}
	t := reflect.TypeOf(fields{})
	for i := range t.NumField() {
		if t.Field(i).IsExported() { // what templates may read
			m[t.Field(i).Name] = i
		}
	}
	return m
}()

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
