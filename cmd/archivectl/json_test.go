package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
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
