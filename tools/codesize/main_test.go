package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The measures find what is over each limit and nothing else: a type of
// 26 methods and not one of 25, a function of 81 lines and not one of 80,
// a file over 600 lines; tests and test-helper packages are not measured.
func TestMeasure(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("package p\n\ntype big struct{}\ntype fine struct{}\n")
	for i := range 26 {
		fmt.Fprintf(&b, "func (big) M%d() {}\n", i)
	}
	for i := range 25 {
		fmt.Fprintf(&b, "func (*fine) M%d() {}\n", i)
	}
	long := func(name string, lines int) {
		fmt.Fprintf(&b, "func %s() {\n", name)
		for range lines - 2 {
			b.WriteString("\t_ = 0\n")
		}
		b.WriteString("}\n")
	}
	long("over", 81)
	long("at", 80)
	for range 600 {
		b.WriteString("// padding\n")
	}
	write := func(path, body string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "p", "p.go"), b.String())
	write(filepath.Join(dir, "p", "p_test.go"), b.String())
	write(filepath.Join(dir, "ptest", "h.go"), b.String())
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	found, st, err := measure(".")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%s %d", f.key(), f.size))
	}
	want := []string{"file p/p.go 816", "func p.over 81", "methods p.big 26"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") || st.files != 1 {
		t.Fatalf("found %v in %d files, want %v in 1", got, st.files, want)
	}
}
