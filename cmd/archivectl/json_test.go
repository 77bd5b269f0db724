package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/storetest"
)

// TestJSONDigestsAreHex (issue 36): --json prints a digest in hex, as the
// text output and sha256sum do, wherever it sits; other bytes stay as
// protobuf's JSON gives them, and empty lists are [].
func TestJSONDigestsAreHex(t *testing.T) {
	sum := bytes.Repeat([]byte{0xab}, 32)
	b, err := protoJSON(&cb.ListBackupsResponse{Backups: []*cb.Backup{{Id: "x", Summary: &cb.ExportSummary{Sha256: sum}}}})
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Backups []struct {
			Summary struct {
				Sha256 string `json:"sha256"`
			} `json:"summary"`
		} `json:"backups"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Backups) != 1 || v.Backups[0].Summary.Sha256 != "abababababababababababababababababababababababababababababababab" {
		t.Errorf("digest in %s; want hex", b)
	}
	empty, err := protoJSON(&cb.ListBackupsResponse{})
	if err != nil || !bytes.Contains(empty, []byte(`"backups":[]`)) {
		t.Errorf("an empty list: %s, %v; want []", empty, err)
	}
}

// TestJSONErrorsAreJSON (issue 51, finding 5): with --json an error is a
// JSON object on stderr, one line: the code, the server's reason, the
// message and the hint, as the text form says them; nothing on stdout.
func TestJSONErrorsAreJSON(t *testing.T) {
	bin := build(t)
	addr, _, _ := serveJobs(t, nil)
	anon := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN="}}
	out, stderr, err := anon.run("--json", "backups", "list", "--owner", "alice")
	if err == nil {
		t.Fatal("archivectl succeeded without a token")
	}
	var got struct {
		Error struct{ Code, Reason, Message, Hint string }
	}
	if jerr := json.Unmarshal([]byte(stderr), &got); jerr != nil || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("stderr with --json is not one JSON object (%v):\n%s", jerr, stderr)
	}
	if got.Error.Code != "Unauthenticated" || got.Error.Reason != "UNAUTHENTICATED" || got.Error.Message == "" || !strings.Contains(got.Error.Hint, "CONTENTBACKUP_TOKEN") {
		t.Errorf("the error object: %+v", got.Error)
	}
	if out != "" {
		t.Errorf("stdout on an error: %q", out)
	}
	_, text, _ := anon.run("backups", "list", "--owner", "alice")
	if want := "archivectl: " + got.Error.Message + " (hint: " + got.Error.Hint + ")"; strings.TrimSpace(text) != want {
		t.Errorf("the text form says other than the JSON one:\n%s\nwant %s", text, want)
	}
}

// TestJSONConvention (issue 51, finding 5): estimate and export name the
// same facts the same way (the API's field names), 64-bit integers are
// strings (exported_at_ns is past 2^53), lint's findings are [] when
// there are none, and a backup no hold keeps has no "hold": null.
func TestJSONConvention(t *testing.T) {
	bin := build(t)
	addr, s, _ := serveJobs(t, nil)
	ctl := tool{t: t, bin: bin, env: []string{"SERVER_ADDR=" + addr, "CONTENTBACKUP_TOKEN=" + ctlToken}}
	owner := storetest.Owner("json")
	if _, err := s.PutGroup(t.Context(), owner, storetest.FullGroup("g")); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(key, bytes.Repeat([]byte{3}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	object := func(args ...string) map[string]any {
		t.Helper()
		out, stderr, err := ctl.run(append([]string{"--json"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: not one JSON object: %v\n%s", args, err, out)
		}
		return v
	}
	est := object("estimate", "--owner", owner)
	exp := object("export", "--owner", owner, "--key-file", key, "--output", filepath.Join(t.TempDir(), "a.xmtp"))
	for _, name := range []string{"groups", "messages", "consent_records", "archive_bytes"} {
		if _, ok := est[name]; !ok {
			t.Errorf("estimate --json lacks %q: %v", name, est)
		}
		if _, ok := exp[name]; !ok {
			t.Errorf("export --json lacks %q: %v", name, exp)
		}
	}
	if _, ok := exp["exported_at_ns"].(string); !ok {
		t.Errorf("export --json: exported_at_ns is %T, want a string (past 2^53 a JSON number loses digits)", exp["exported_at_ns"])
	}
	if findings, ok := object("lint", "--owner", owner)["findings"].([]any); !ok || len(findings) != 0 {
		t.Errorf("lint --json of a clean owner: findings %v, want []", findings)
	}
	if _, _, err := ctl.run("jobs", "start-export", "--owner", owner, "--wait"); err != nil {
		t.Fatal(err)
	}
	out, _, err := ctl.run("--json", "backups", "list", "--owner", owner)
	if err != nil || strings.Contains(out, "null") {
		t.Errorf("backups list --json: %v\n%s", err, out)
	}

	// stats and diff (restic's next reach), from the catalog: a second
	// backup after one more message.
	if _, err := s.AppendMessages(t.Context(), owner, storetest.Messages("m", storetest.GroupID("g"), 1, 1), store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ctl.run("jobs", "start-export", "--owner", owner, "--wait"); err != nil {
		t.Fatal(err)
	}
	total, _ := object("backups", "stats", "--owner", owner)["total"].(map[string]any)
	if total["complete"] != "2" || total["messages"] != "1" || total["bucket"] != "all" {
		t.Errorf("backups stats --json: total %v; want 2 complete backups holding 1 message, counts as strings", total)
	}
	var list []map[string]any
	out, _, _ = ctl.run("--json", "backups", "list", "--owner", owner)
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Fatalf("backups list: %v\n%s", err, out)
	}
	// Newest first: the older is the second.
	older := list[1]["id"].(string)
	diff := object("backups", "diff", "--owner", owner, older[:len(older)-4], list[0]["id"].(string))
	counts, _ := diff["counts"].([]any)
	if len(counts) != 4 {
		t.Fatalf("backups diff --json: %v", diff)
	}
	if m := counts[1].(map[string]any); m["name"] != "messages" || m["from"] != "0" || m["to"] != "1" || m["delta"] != "1" {
		t.Errorf("backups diff --json: messages %v; want 0 to 1, +1, as strings", m)
	}
	text, _, err := ctl.run("backups", "diff", "--owner", owner, list[1]["id"].(string), list[0]["id"].(string))
	if err != nil || !strings.Contains(text, "messages") || !strings.Contains(text, "+1") {
		t.Errorf("backups diff: %v\n%s", err, text)
	}
}
