// Command codesize measures the production Go code against the house's
// sizes (issue 48): no type with more than 25 methods, no function over
// 80 lines, no file over 600 lines, outside generated code, tests and
// their helper packages, tools and the codec catalogue. The code does not meet them all yet, so it is
// a ratchet: -check compares what it finds with an allowance file of the
// known offenders and their sizes, and fails on a new offender or on one
// that grew; -write records the allowance (after a refactor shrinks it).
//
//	go run ./tools/codesize                          # the figures
//	go run ./tools/codesize -check tools/codesize/allowed.txt
//	go run ./tools/codesize -write tools/codesize/allowed.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	maxMethods   = 25
	maxFuncLines = 80
	maxFileLines = 600
)

// finding is one measure over its limit: kind (methods, func, file), the
// thing measured and its size.
type finding struct {
	kind, name string
	size       int
}

func (f finding) key() string { return f.kind + " " + f.name }

func main() {
	check := flag.String("check", "", "allowance file: fail on a finding it does not allow, or one larger than it allows")
	write := flag.String("write", "", "write the findings to this allowance file")
	flag.Parse()
	found, stats, err := measure(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "codesize:", err)
		os.Exit(2)
	}
	fmt.Printf("%d files, %d functions, %d types measured; over the limits: %d types with more than %d methods, %d functions over %d lines, %d files over %d lines\n",
		stats.files, stats.funcs, stats.types, count(found, "methods"), maxMethods, count(found, "func"), maxFuncLines, count(found, "file"), maxFileLines)
	switch {
	case *write != "":
		if err := writeAllowance(*write, found); err != nil {
			fmt.Fprintln(os.Stderr, "codesize:", err)
			os.Exit(2)
		}
	case *check != "":
		allowed, err := readAllowance(*check)
		if err != nil {
			fmt.Fprintln(os.Stderr, "codesize:", err)
			os.Exit(2)
		}
		bad := 0
		for _, f := range found {
			limit, ok := allowed[f.key()]
			switch {
			case !ok:
				fmt.Printf("new: %s is %d (the limit is %d): split it\n", f.key(), f.size, limitOf(f.kind))
				bad++
			case f.size > limit:
				fmt.Printf("grew: %s is %d, allowed %d: shrink it back (or split it)\n", f.key(), f.size, limit)
				bad++
			}
		}
		if bad > 0 {
			os.Exit(1)
		}
	default:
		for _, f := range found {
			fmt.Printf("%-8s %5d  %s\n", f.kind, f.size, f.name)
		}
	}
}

func limitOf(kind string) int {
	switch kind {
	case "methods":
		return maxMethods
	case "func":
		return maxFuncLines
	}
	return maxFileLines
}

func count(found []finding, kind string) int {
	n := 0
	for _, f := range found {
		if f.kind == kind {
			n++
		}
	}
	return n
}

type stats struct{ files, funcs, types int }

// measure walks the production Go files under root.
func measure(root string) ([]finding, stats, error) {
	var found []finding
	var st stats
	methods := map[string]int{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "tools", "test", "node_modules", "testdata", "third_party", ".git", "interop", "bench":
				return filepath.SkipDir
			}
			if strings.HasSuffix(d.Name(), "test") {
				return filepath.SkipDir // a package of test helpers (storetest, backuptest, ...)
			}
			return nil
		}
		if !production(path) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		st.files++
		if lines := fset.File(f.Pos()).LineCount(); lines > maxFileLines && !catalogue(path) {
			found = append(found, finding{"file", filepath.ToSlash(path), lines})
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.TYPE {
					st.types += len(g.Specs)
				}
				continue
			}
			st.funcs++
			name := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				recv := receiver(fn.Recv.List[0].Type)
				methods[dir+"."+recv]++
				name = recv + "." + name
			}
			if fn.Body != nil {
				lines := fset.Position(fn.Body.End()).Line - fset.Position(fn.Pos()).Line + 1
				if lines > maxFuncLines && !catalogue(path) {
					found = append(found, finding{"func", dir + "." + name, lines})
				}
			}
		}
		return nil
	})
	for t, n := range methods {
		if n > maxMethods {
			found = append(found, finding{"methods", t, n})
		}
	}
	slices.SortFunc(found, func(a, b finding) int { return strings.Compare(a.key(), b.key()) })
	return found, st, err
}

// production: a Go file that is not a test.
func production(path string) bool {
	return strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go")
}

// catalogue: the codec catalogue, one table of every content type, long
// by design.
func catalogue(path string) bool {
	return strings.HasPrefix(filepath.ToSlash(path), "internal/codec/")
}

func receiver(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiver(t.X)
	case *ast.IndexExpr:
		return receiver(t.X)
	case *ast.IndexListExpr:
		return receiver(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

func writeAllowance(path string, found []finding) error {
	var b strings.Builder
	b.WriteString("# The known offenders against tools/codesize's limits and their sizes:\n# a ratchet. make lint fails on a new one or one that grows. Rewrite it\n# with go run ./tools/codesize -write tools/codesize/allowed.txt after a\n# refactor shrinks them.\n")
	for _, f := range found {
		fmt.Fprintf(&b, "%s %d\n", f.key(), f.size)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func readAllowance(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.Atoi(line[i+1:])
		if i < 0 || err != nil {
			return nil, fmt.Errorf("%s: %q is not \"kind name size\"", path, line)
		}
		out[line[:i]] = n
	}
	return out, sc.Err()
}
