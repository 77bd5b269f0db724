package doclines

import (
	"reflect"
	"testing"
)

func TestFind(t *testing.T) {
	doc := []byte("Run `archivectl verify a.xmtp --key-file k` or the group `archivectl backups`.\n\n" +
		"```sh\nexport CONTENTBACKUP_TOKEN=x\nSERVER_ADDR=h:1 archivectl export --owner alice \\\n  --out a.xmtp --key-file k 2>/dev/null | tail -1\n```\n" +
		"```json\n{\"archivectl export\": 1}\n```\n" +
		"```sh\n$ go run ./cmd/archivectl import 'my file.xmtp' --owner \"bob smith\" # a comment\n```\n")
	got := find("doc.md", doc, []string{"archivectl", "go run ./cmd/archivectl"})
	want := [][]string{
		{"verify", "a.xmtp", "--key-file", "k"},
		{"backups"},
		{"export", "--owner", "alice", "--out", "a.xmtp", "--key-file", "k"},
		{"import", "my file.xmtp", "--owner", "bob smith"},
	}
	if len(got) != len(want) {
		t.Fatalf("found %d lines, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i].Args, want[i]) {
			t.Errorf("line %d: %q, want %q", i, got[i].Args, want[i])
		}
	}
	if got[2].N != 5 {
		t.Errorf("the continued line starts at %d, want 5", got[2].N)
	}
}
