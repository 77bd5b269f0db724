// Package figures holds the documents that report measurements and
// behaviour (README.md, BENCHMARKS.md, RELIABILITY.md, SECURITY.md,
// TESTING.md, docs/) to the repository: each command they name to
// reproduce a figure exists, and so does each test, benchmark or fuzz
// target they cite, so that no figure points at something deleted.
package figures

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const root = "../.."

var (
	codeSpan   = regexp.MustCompile("`([^`\n]+)`")
	makeCmd    = regexp.MustCompile(`(?:^|[;&|(]\s*|\s)make ([a-z][a-z0-9-]*)`)
	cited      = regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz)[A-Z0-9][A-Za-z0-9_]*)`)
	makeTarget = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
	declared   = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
)

// documents are the files whose figures and citations are checked.
func documents(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md", "BENCHMARKS.md", "RELIABILITY.md", "SECURITY.md", "TESTING.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		docs = append(docs, rel)
	}
	return docs
}

// code is every command line and code span of a Markdown document: the
// text of fenced blocks and of `spans`.
func code(doc string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			out = append(out, line)
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestDocumentedCommandsExist: every `make TARGET` a document shows is a
// target of the Makefile.
func TestDocumentedCommandsExist(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	for _, doc := range documents(t) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range code(string(text)) {
			for _, m := range makeCmd.FindAllStringSubmatch(c, -1) {
				if !targets[m[1]] {
					t.Errorf("%s shows `make %s`; the Makefile has no such target", doc, m[1])
				}
			}
		}
	}
}

// TestCitedTestsExist: every test, benchmark or fuzz target a document
// names in code is declared in some test file.
func TestCitedTestsExist(t *testing.T) {
	have := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != root) {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range declared.FindAllStringSubmatch(string(src), -1) {
				have[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	missing := map[string][]string{}
	for _, doc := range documents(t) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range code(string(text)) {
			for _, m := range cited.FindAllStringSubmatch(c, -1) {
				name := strings.TrimRight(m[1], "_")
				if !have[name] && !prefixOfOne(name, have) {
					missing[doc] = append(missing[doc], name)
				}
			}
		}
	}
	docs := make([]string, 0, len(missing))
	for d := range missing {
		docs = append(docs, d)
	}
	sort.Strings(docs)
	for _, d := range docs {
		t.Errorf("%s cites tests no test file declares: %s", d, strings.Join(missing[d], ", "))
	}
}

// prefixOfOne: a document may cite a family by its common prefix
// (TestCompressed for TestCompressedGRPC...), as -run does.
func prefixOfOne(name string, have map[string]bool) bool {
	for h := range have {
		if strings.HasPrefix(h, name) {
			return true
		}
	}
	return false
}

// TestNoUncommittedFigures: a figure is reproduced by a committed
// command; "not committed" marks one that is not.
func TestNoUncommittedFigures(t *testing.T) {
	for _, doc := range documents(t) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(text), "not committed") {
			t.Errorf("%s reports a figure whose command is not committed", doc)
		}
	}
}

// TestDocsIndexListsEveryPage: docs/README.md, the index of docs/, links
// every page there and no page that is not (issue 51, finding 4).
func TestDocsIndexListsEveryPage(t *testing.T) {
	index, err := os.ReadFile(filepath.Join(root, "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, p := range pages {
		have[filepath.Base(p)] = true
	}
	linked := map[string]bool{}
	for _, m := range regexp.MustCompile(`\]\(([a-z0-9-]+\.md)\)`).FindAllStringSubmatch(string(index), -1) {
		linked[m[1]] = true
		if !have[m[1]] {
			t.Errorf("docs/README.md links %s, which docs/ lacks", m[1])
		}
	}
	for page := range have {
		if page != "README.md" && !linked[page] {
			t.Errorf("docs/README.md does not list docs/%s", page)
		}
	}
}
