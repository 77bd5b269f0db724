// Package deploy holds the monitoring files in deploy/ to the code: every
// metric a dashboard panel or an alert rule reads is one the server
// defines, so a renamed metric cannot leave a panel blank or an alert
// silent.
package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const root = "../.."

// metricRef is a metric name in a PromQL expression.
var metricRef = regexp.MustCompile(`\bcontentbackup_[a-z0-9_]+`)

// definedName is a metric's name where the code defines it: in a
// metric's options, or in the descriptor of a collector of its own (the
// pgx pool's).
var definedName = regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(contentbackup_[a-z0-9_]+)"`)

// defined reads every metric name the server's code defines; a
// histogram's also as its _bucket, _count and _sum series.
func defined(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range definedName.FindAllStringSubmatch(string(b), -1) {
				// One room for every definition (issue 48): a dashboard,
				// an alert and a reader of the code find them all there.
				if rel, _ := filepath.Rel(root, path); filepath.Dir(rel) != filepath.Join("internal", "telemetry") {
					t.Errorf("%s defines the metric %s: metrics are defined in internal/telemetry", rel, m[1])
				}
				names[m[1]] = true
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					names[m[1]+suffix] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metric names in the code: the pattern no longer matches how metrics are defined", len(names))
	}
	return names
}

func check(t *testing.T, file string, exprs []string, names map[string]bool) {
	t.Helper()
	if len(exprs) == 0 {
		t.Fatalf("%s: no expressions found", file)
	}
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, ref := range metricRef.FindAllString(e, -1) {
			seen[ref] = true
			if !names[ref] {
				t.Errorf("%s reads %s, which the server does not define: %s", file, ref, e)
			}
		}
	}
	var list []string
	for n := range seen {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("%s reads %d metrics: %v", file, len(list), list)
}

func TestDashboardReadsDefinedMetrics(t *testing.T) {
	names := defined(t)
	files, _ := filepath.Glob(filepath.Join(root, "deploy/grafana/*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboard in deploy/grafana")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var dash struct {
			UID    string `json:"uid"`
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(b, &dash); err != nil || dash.UID == "" {
			t.Fatalf("%s: not a dashboard (%v)", f, err)
		}
		var exprs []string
		for _, p := range dash.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			for _, q := range p.Targets {
				exprs = append(exprs, q.Expr)
			}
		}
		check(t, f, exprs, names)
	}
}

// exprLine is an alert rule's expr, on one line or in a block after it.
var exprLine = regexp.MustCompile(`(?m)^\s+expr:\s*(.*)$`)

func TestAlertRulesReadDefinedMetrics(t *testing.T) {
	names := defined(t)
	f := filepath.Join(root, "deploy/prometheus/contentbackup-alerts.yml")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	// Every metric name anywhere in the rules file counts: block exprs
	// span lines, and a name in an annotation must exist too.
	var exprs []string
	for _, line := range strings.Split(string(b), "\n") {
		if trimmed := strings.TrimSpace(line); !strings.HasPrefix(trimmed, "#") {
			exprs = append(exprs, line)
		}
	}
	if len(exprLine.FindAllString(string(b), -1)) < 4 {
		t.Fatalf("%s: fewer than 4 rules", f)
	}
	check(t, f, exprs, names)
}

// runbookURL is an alert's runbook_url: docs/runbook.md and a section.
var runbookURL = regexp.MustCompile(`runbook_url:\s*"[^"]*/docs/runbook\.md#([a-z0-9-]+)"`)

// TestAlertRulesHaveRunbooks: every alert names a section of
// docs/runbook.md that exists (GitHub's anchor of a "## " heading).
func TestAlertRulesHaveRunbooks(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/contentbackup-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	book, err := os.ReadFile(filepath.Join(root, "docs/runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(book), "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok {
			sections[strings.ReplaceAll(strings.ToLower(strings.TrimSpace(title)), " ", "-")] = true
		}
	}
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatchIndex(string(rules), -1)
	if len(alerts) < 7 {
		t.Fatalf("%d alerts; want at least 7", len(alerts))
	}
	for i, a := range alerts {
		end := len(rules)
		if i+1 < len(alerts) {
			end = alerts[i+1][0]
		}
		name := string(rules[a[2]:a[3]])
		m := runbookURL.FindSubmatch(rules[a[0]:end])
		switch {
		case m == nil:
			t.Errorf("alert %s has no runbook_url into docs/runbook.md", name)
		case !sections[string(m[1])]:
			t.Errorf("alert %s's runbook_url names #%s, which docs/runbook.md has no section for", name, m[1])
		}
	}
}
