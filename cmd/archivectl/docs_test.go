package main

import (
	"io"
	"strings"
	"testing"

	"github.com/contentbackup/contentbackup/internal/doclines"
)

// wrongCommandLine reports whether a parse error says the command line
// itself is wrong (a flag or subcommand that does not exist, an argument
// too many), rather than what a doc's placeholder cannot satisfy (a file
// that is not here, a value left to the reader) or a doc naming a command
// group ("archivectl backups") rather than running it.
func wrongCommandLine(err error) bool {
	msg := err.Error()
	for _, s := range []string{"unknown flag", "unexpected argument", "did you mean"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// TestDocsCommandLinesParse (issue 51): every archivectl command line the
// README and the docs show names subcommands and flags archivectl has.
func TestDocsCommandLinesParse(t *testing.T) {
	pages, err := doclines.Pages("../..")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := doclines.Find(pages, "archivectl", "go run ./cmd/archivectl", "bin/archivectl", "./archivectl")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 50 {
		t.Fatalf("only %d archivectl command lines found in the docs", len(lines))
	}
	// The mistakes issue 51 found in the docs, which this test must catch.
	lines = append(lines,
		doclines.Line{File: "known mistake", Text: "archivectl backups retention --schedules", Args: []string{"backups", "retention", "--schedules"}},
		doclines.Line{File: "known mistake", Text: "archivectl holds set --until 1h", Args: []string{"holds", "set", "--owner", "a", "--until", "1h"}})
	caught := 0
	for _, l := range lines {
		var c cli
		parser, err := newParser(t.Context(), &c)
		if err != nil {
			t.Fatal(err)
		}
		parser.Exit = func(int) {}
		parser.Stdout, parser.Stderr = io.Discard, io.Discard
		_, err = parser.Parse(l.Args)
		wrong := err != nil && wrongCommandLine(err)
		if l.File == "known mistake" {
			if wrong {
				caught++
			}
			continue
		}
		if wrong {
			t.Errorf("%s\n\t%v", l, err)
		}
	}
	if caught != 2 {
		t.Errorf("%d of the 2 known mistakes caught", caught)
	}
	t.Logf("%d command lines parsed", len(lines))
}
