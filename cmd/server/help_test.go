package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestHelpInSections (issue 48): serve --help reads in sections, in the
// order helpGroups gives them, and every flag of serve (but help and
// version) stands in one.
func TestHelpInSections(t *testing.T) {
	var c cli
	var out bytes.Buffer
	parser, err := kong.New(&c, append(parserOptions(), kong.Writers(&out, &out), kong.Exit(func(int) {}))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse([]string{"serve", "--help"}); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	at := 0
	for _, title := range []string{"Serving", "Security", "Store", "Limits", "Backup jobs", "History server", "Observability"} {
		i := strings.Index(help[at:], "\n"+title+"\n")
		if i < 0 {
			t.Fatalf("serve --help has no section %q after position %d:\n%s", title, at, help)
		}
		at += i + 1
	}
	for _, n := range parser.Model.Children {
		if n.Name != "serve" {
			continue
		}
		for _, f := range n.Flags {
			if f.Group == nil {
				t.Errorf("--%s stands in no section of serve --help", f.Name)
			}
		}
	}
}
