// Package readme runs the README: every sh block, in order, as a newcomer
// would paste it, against the servers the README itself starts, in a copy
// of the repository. An output block right after a block is what it must
// print (matchOutput); one that starts "ERROR:" or "Error invoking
// method" (grpcurl's words for a failed call) says the block must fail; a
// block after "<!-- readme-test: skip (why) -->" is not run.
package readme

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

type block struct {
	line       int
	text       string
	skip       string
	expectFail bool
	// want is the output block right after it ("" when none), JSON when
	// its fence says json; the test compares what the block prints with
	// it (see matchOutput).
	want     string
	wantJSON bool
	wantLine int
}

// parse returns the README's sh blocks.
func parse(t *testing.T, readme []byte) []block {
	t.Helper()
	var (
		blocks   []block
		cur      *block
		skipNext string
		inFence  bool
		fenceSh  bool
		body     strings.Builder
		lastSh   = -1
		shClose  = -1 // the line that closed the last sh block
		output   = -1 // the sh block whose output block is open
		jsonOut  bool
	)
	sc := bufio.NewScanner(bytes.NewReader(readme))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !inFence && strings.HasPrefix(line, "<!-- readme-test: skip"):
			skipNext = line
		case !inFence && strings.HasPrefix(line, "```"):
			inFence, fenceSh = true, line == "```sh"
			body.Reset()
			if fenceSh {
				cur = &block{line: n, skip: skipNext}
				skipNext = ""
			} else if n == shClose+1 && lastSh >= 0 {
				output, jsonOut = lastSh, line == "```json"
				blocks[lastSh].wantLine = n
			}
		case inFence && line == "```":
			inFence = false
			if fenceSh {
				cur.text = body.String()
				blocks = append(blocks, *cur)
				lastSh, shClose = len(blocks)-1, n
			} else if failed := body.String(); (strings.HasPrefix(failed, "ERROR:") || strings.HasPrefix(failed, "Error invoking method")) && lastSh >= 0 {
				blocks[lastSh].expectFail = true
			}
			if !fenceSh && output >= 0 {
				blocks[output].want, blocks[output].wantJSON = body.String(), jsonOut
				output = -1
			}
			if !fenceSh {
				lastSh = -1
			}
		case inFence:
			body.WriteString(line + "\n")
		}
	}
	if inFence {
		t.Fatal("README: an unclosed code fence")
	}
	return blocks
}

var listenFlag = regexp.MustCompile(`--listen (\S+)`)

// script turns the blocks into one bash script: a server started in the
// foreground by the README is started in the background here, and the
// script waits for every server it starts to answer.
func script(blocks []block) string {
	var b strings.Builder
	b.WriteString(`set -euo pipefail
# Stop every server the README started: the whole process group, but not
# this shell, whose exit status is the verdict.
trap 'status=$?; trap "" TERM; kill -TERM 0 2>/dev/null; exit $status' EXIT
if (exec 3<>/dev/tcp/127.0.0.1/50051) 2>/dev/null; then echo "something already answers on 127.0.0.1:50051, where the README starts its server: stop it first" >&2; exit 1; fi
wait_port() { for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.2; done; echo "nothing answers on $1" >&2; exit 1; }
wait_file() { for _ in $(seq 600); do [ -s "$1" ] && return 0; sleep 0.2; done; echo "no $1" >&2; exit 1; }
`)
	for _, bl := range blocks {
		fmt.Fprintf(&b, "\necho '--- README line %d' >&2\n", bl.line)
		switch text := strings.TrimSpace(bl.text); {
		case bl.skip != "":
			fmt.Fprintf(&b, "# skipped: %s\n", bl.skip)
		case text == "go run ./cmd/server":
			b.WriteString("go run ./cmd/server > server.log 2>&1 &\nwait_port 50051\nwait_file data/dev-token\n")
		case bl.expectFail:
			fmt.Fprintf(&b, "if (\n%s) >\"$READMEOUT/%d\" 2>&1; then echo 'README line %d: this block should fail' >&2; exit 1; fi\ncat \"$READMEOUT/%d\" >&2\n", bl.text, bl.line, bl.line, bl.line)
		case bl.want != "" && !strings.HasSuffix(text, "&"):
			// Its standard output is compared with the README's; the
			// group runs in this shell, so what it exports stays.
			fmt.Fprintf(&b, "{\n%s} >\"$READMEOUT/%d\"\ncat \"$READMEOUT/%d\" >&2\n", bl.text, bl.line, bl.line)
		default:
			b.WriteString(bl.text)
			if strings.HasSuffix(text, "&") {
				port := "50051"
				if m := listenFlag.FindStringSubmatch(text); m != nil {
					port = m[1][strings.LastIndexByte(m[1], ':')+1:]
				}
				fmt.Fprintf(&b, "wait_port %s\n", port)
			}
		}
	}
	return b.String()
}

// copyRepo copies the tracked files (and any not yet committed) into dir.
func copyRepo(t *testing.T, root, dir string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(w, in)
		in.Close()
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestREADME(t *testing.T) {
	for _, tool := range []string{"grpcurl", "bash", "git", "od", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README needs %s on PATH (make tools installs grpcurl): %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := parse(t, readme)
	ran := 0
	for _, b := range blocks {
		if b.skip == "" {
			ran++
		}
	}
	if ran < 15 {
		t.Fatalf("only %d runnable sh blocks found in the README", ran)
	}
	dir := t.TempDir()
	copyRepo(t, root, dir)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	outputs := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", "-c", script(blocks))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "READMEOUT="+outputs)
	// Its own process group, so the servers it starts in the background
	// (and go run's children) are stopped with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }()
	if err := cmd.Wait(); err != nil {
		logs, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		t.Fatalf("the README's blocks failed: %v\n%s\nserver log:\n%s", err, out.String(), logs)
	}
	t.Logf("ran %d README blocks (%d skipped)", ran, len(blocks)-ran)
	compared := 0
	for _, bl := range blocks {
		if bl.want == "" || bl.skip != "" || strings.HasSuffix(strings.TrimSpace(bl.text), "&") {
			continue
		}
		got, err := os.ReadFile(filepath.Join(outputs, fmt.Sprint(bl.line)))
		if err != nil {
			t.Errorf("README line %d: no output captured: %v", bl.line, err)
			continue
		}
		compared++
		if why := matchOutput(bl.want, string(got), bl.wantJSON); why != "" {
			t.Errorf("README line %d shows an output (line %d) the block does not print: %s\nshown:\n%s\nprinted:\n%s", bl.line, bl.wantLine, why, bl.want, got)
		}
	}
	t.Logf("compared %d shown outputs with what their blocks print", compared)
	leftInCheckout(t, root, dir)
}

// leftInCheckout fails on a file the walkthrough wrote that git would
// not ignore in a checkout: following the README there must leave no key,
// token or archive that `git add .` would commit, or that the next run of
// this test would find (it copies untracked files, and keys are never
// overwritten).
func leftInCheckout(t *testing.T, root, dir string) {
	t.Helper()
	tracked, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	known := map[string]bool{}
	for _, f := range strings.Split(strings.TrimRight(string(tracked), "\x00"), "\x00") {
		known[f] = true
	}
	var written []string
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if !known[rel] {
			written = append(written, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) == 0 {
		return
	}
	check := exec.Command("git", "-C", root, "check-ignore", "--no-index", "--verbose", "--non-matching", "--stdin")
	check.Stdin = strings.NewReader(strings.Join(written, "\n") + "\n")
	out, _ := check.Output() // exit 1 when some path is not ignored
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// A path no pattern matches is printed as "::\t<path>".
		if strings.HasPrefix(line, "::\t") {
			t.Errorf("the walkthrough leaves %s in the checkout, and .gitignore does not cover it", strings.TrimPrefix(line, "::\t"))
		}
	}
}

// TestREADMELinks: every in-page link of the README names a heading, and
// every relative link names a file of the repository.
func TestREADMELinks(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	slug := regexp.MustCompile(`[^a-z0-9 -]`)
	inFence := false
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(line, "#") {
			title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
			anchors[strings.ReplaceAll(slug.ReplaceAllString(title, ""), " ", "-")] = true
		}
	}
	links := regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(string(readme), -1)
	if len(links) == 0 {
		t.Fatal("no links found in the README")
	}
	for _, m := range links {
		target := m[1]
		switch {
		case strings.HasPrefix(target, "#"):
			if !anchors[target[1:]] {
				t.Errorf("README links to %s, which is no heading", target)
			}
		case strings.Contains(target, "://"):
		default:
			if _, err := os.Stat(filepath.Join(root, strings.SplitN(target, "#", 2)[0])); err != nil {
				t.Errorf("README links to %s: %v", target, err)
			}
		}
	}
}
