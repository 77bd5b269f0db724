// Package doclines finds the command lines of a program that the docs
// show, so that tests can parse each against the program's flags: a
// renamed flag or subcommand then fails a test rather than a reader.
package doclines

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Line is one command line of a program, as a doc shows it.
type Line struct {
	File string
	N    int
	Text string
	Args []string // after the program's name
}

func (l Line) String() string { return fmt.Sprintf("%s:%d: %s", l.File, l.N, l.Text) }

// Pages are the pages of the repository at root whose command lines are
// held to the binaries: the README, the pages beside it and docs/.
func Pages(root string) ([]string, error) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, p := range []string{"README.md", "TESTING.md", "RELIABILITY.md", "SECURITY.md", "BENCHMARKS.md"} {
		pages = append(pages, filepath.Join(root, p))
	}
	return pages, nil
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// Find returns every invocation of program in the shell blocks of files
// (```sh, with continuation lines joined) and in their inline code. An
// invocation starts with the program's name, or with one of aliases (`go
// run ./cmd/server`), after variable assignments; it ends at a pipe, a
// redirection, `&&`, `;` or a comment.
func Find(files []string, program string, aliases ...string) ([]Line, error) {
	var out []Line
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, find(f, b, append([]string{program}, aliases...))...)
	}
	return out, nil
}

func find(file string, b []byte, names []string) []Line {
	var out []Line
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inSh, inFence := false, false
	joined, start := "", 0
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "```") {
			if inFence {
				inFence, inSh = false, false
			} else {
				inFence, inSh = true, line == "```sh" || line == "```bash" || line == "```console"
			}
			continue
		}
		if inSh {
			if joined == "" {
				start = n
			}
			if strings.HasSuffix(line, "\\") {
				joined += strings.TrimSuffix(line, "\\") + " "
				continue
			}
			joined += strings.TrimPrefix(line, "$ ")
			if l, ok := invocation(joined, names); ok {
				out = append(out, Line{File: file, N: start, Text: joined, Args: l})
			}
			joined = ""
			continue
		}
		if inFence {
			continue
		}
		for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
			if l, ok := invocation(m[1], names); ok {
				out = append(out, Line{File: file, N: n, Text: m[1], Args: l})
			}
		}
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// invocation is text's arguments after one of names, when text invokes it.
func invocation(text string, names []string) ([]string, bool) {
	words := split(text)
	for len(words) > 0 && assignment.MatchString(words[0]) {
		words = words[1:]
	}
	for _, name := range names {
		nw := strings.Fields(name)
		if len(words) < len(nw) {
			continue
		}
		match := true
		for i := range nw {
			if words[i] != nw[i] {
				match = false
			}
		}
		if match {
			return words[len(nw):], true
		}
	}
	return nil, false
}

// split is text's words, as a shell would split them before expansion,
// up to the end of the first simple command.
func split(text string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	rs := []rune(text)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			flush()
		case r == '|' || r == ';' || r == '&' || r == '>' || r == '<' || r == '#' && !inWord:
			flush()
			return trimRedirect(words)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

// trimRedirect drops a trailing file descriptor number ("2" of "2>").
func trimRedirect(words []string) []string {
	if n := len(words); n > 0 && (words[n-1] == "2" || words[n-1] == "1") {
		return words[:n-1]
	}
	return words
}
