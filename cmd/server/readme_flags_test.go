package main

import (
	"os"
	"regexp"
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
	parser, err := kong.New(&c, append(parserOptions(), kong.Exit(func(int) { t.Fatal("kong exited") }))...)
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

// serverEnvs are the environment variables the server's flags read.
func serverEnvs(t *testing.T) map[string]bool {
	t.Helper()
	var c cli
	parser, err := kong.New(&c, append(parserOptions(), kong.Exit(func(int) { t.Fatal("kong exited") }))...)
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, group := range n.AllFlags(true) {
			for _, f := range group {
				for _, e := range f.Envs {
					envs[e] = true
				}
			}
		}
		for _, child := range n.Children {
			walk(child)
		}
	}
	walk(parser.Model.Node)
	return envs
}

// TestDeployFilesSetOnlyRealFlags: every variable the Kubernetes manifest
// and the compose file give the server is one of its flags' (a misspelt
// one is silently ignored by the server), besides the Go runtime's and
// the cloud SDKs' own; and the manifest, whose replicas share nothing on
// disk, gives the jobs a shared bucket and key keeper (issue 36: both
// were commented out).
func TestDeployFilesSetOnlyRealFlags(t *testing.T) {
	envs := serverEnvs(t)
	other := regexp.MustCompile(`^(GOMEMLIMIT|GOMAXPROCS|GOGC|AWS_[A-Z0-9_]+|GOOGLE_[A-Z0-9_]+|AZURE_[A-Z0-9_]+|POSTGRES_[A-Z0-9_]+)$`)
	manifest, err := os.ReadFile("../../deploy/kubernetes/contentbackup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^\s*-\s*(?:\{\s*)?name:\s*([A-Z][A-Z0-9_]*)\b`).FindAllSubmatch(manifest, -1)
	if len(names) < 10 {
		t.Fatalf("found %d variables in the manifest", len(names))
	}
	seen := map[string]bool{}
	for _, m := range names {
		name := string(m[1])
		seen[name] = true
		if !envs[name] && !other.MatchString(name) {
			t.Errorf("kubernetes: %s is not a variable any server flag reads", name)
		}
	}
	for _, want := range []string{"JOB_BUCKETS", "JOB_KEY_KEEPER"} {
		if !seen[want] {
			t.Errorf("kubernetes: %s is not set: replicas on a read-only filesystem need a shared bucket and key keeper", want)
		}
	}
	doc := yamlDocs(t, "../../deploy/compose/docker-compose.yaml")[0]
	services, _ := doc["services"].(map[string]any)
	checked := 0
	for name, svc := range services {
		if name == "postgres" {
			continue // the database's own image
		}
		env, _ := svc.(map[string]any)["environment"].(map[string]any)
		for key := range env {
			checked++
			if !envs[key] && !other.MatchString(key) {
				t.Errorf("compose: service %s sets %s, which no server flag reads", name, key)
			}
		}
	}
	if checked < 3 {
		t.Fatalf("found %d variables in the compose file's services", checked)
	}
}
