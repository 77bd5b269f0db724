package sqlite

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPageCapIsTestOnly: the page cap (Options.MaxPages, SetMaxPages)
// stands in for a full disk in tests; no code that goes into a binary
// (any non-test file outside this package) sets it, so no flag, request
// or configuration reaches it.
func TestPageCapIsTestOnly(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	here, _ := filepath.Abs(".")
	use := regexp.MustCompile(`\bSetMaxPages\(|\bMaxPages:`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == here {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if loc := use.FindIndex(src); loc != nil {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s sets SQLite's page cap (%q): it is for tests only", rel, src[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
