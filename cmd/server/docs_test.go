package main

import (
	"io"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/contentbackup/contentbackup/internal/doclines"
)

// TestDocsServerCommandLinesParse (issue 51): every server command line
// the README and the docs show (go run ./cmd/server, bin/server, server
// migrate...) names commands and flags the server has.
func TestDocsServerCommandLinesParse(t *testing.T) {
	pages, err := doclines.Pages("../..")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := doclines.Find(pages, "server", "go run ./cmd/server", "bin/server", "./server", "/server")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 10 {
		t.Fatalf("only %d server command lines found in the docs", len(lines))
	}
	lines = append(lines, doclines.Line{File: "known mistake", Text: "server --listne :1", Args: []string{"--listne", ":1"}})
	caught := false
	for _, l := range lines {
		var c cli
		parser, err := kong.New(&c, parserOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		parser.Exit = func(int) {}
		parser.Stdout, parser.Stderr = io.Discard, io.Discard
		_, err = parser.Parse(l.Args)
		wrong := err != nil && (strings.Contains(err.Error(), "unknown flag") || strings.Contains(err.Error(), "unexpected argument"))
		if l.File == "known mistake" {
			caught = wrong
			continue
		}
		if wrong {
			t.Errorf("%s\n\t%v", l, err)
		}
	}
	if !caught {
		t.Error("a misspelled flag was not caught")
	}
	t.Logf("%d command lines parsed", len(lines))
}
