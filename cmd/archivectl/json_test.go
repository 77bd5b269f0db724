package main

import (
	"bytes"
	"encoding/json"
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
