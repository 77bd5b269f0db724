package main

import (
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/contentbackup/contentbackup/internal/auth"
)

// TestREADMEFlagTable: every flag of `server serve` is in the README's
// flag table, on a row that also names its environment variable, so a
// flag added without a word there fails here (issue 36: 14 flags were
// missing, and one row named the wrong variable).
func TestREADMEFlagTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `--") {
			rows = append(rows, line)
		}
	}
	var c cli
	parser, err := kong.New(&c, kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	var serve *kong.Node
	for _, n := range parser.Model.Children {
		if n.Name == "serve" {
			serve = n
		}
	}
	if serve == nil {
		t.Fatal("no serve command")
	}
	checked := 0
	for _, f := range serve.AllFlags(true) {
		for _, flag := range f {
			if flag.Hidden || flag.Name == "help" {
				continue
			}
			checked++
			name := "`--" + flag.Name + "`"
			if flag.Tag != nil && flag.Tag.Negatable != "" {
				name = "`--[no-]" + flag.Name + "`"
			}
			row := ""
			for _, r := range rows {
				cell := strings.SplitN(r, "|", 3)[1]
				if strings.Contains(cell, name) {
					row = r
				}
			}
			if row == "" {
				t.Errorf("flag --%s is not in the README's flag table", flag.Name)
				continue
			}
			for _, env := range flag.Envs {
				if !strings.Contains(row, "`"+env+"`") {
					t.Errorf("the README's row for --%s does not name its variable %s", flag.Name, env)
				}
			}
		}
	}
	if checked < 40 {
		t.Errorf("only %d flags checked", checked)
	}
}

// TestREADMEScopeTable: every scope a policy may grant has its row in the
// README's scopes table (archive.migrate had none).
func TestREADMEScopeTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range auth.KnownScopes {
		if !strings.Contains(string(readme), "\n| `"+string(s)+"` |") {
			t.Errorf("scope %s has no row in the README's scopes table", s)
		}
	}
}
