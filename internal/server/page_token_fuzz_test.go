package server

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/contentbackup/contentbackup/internal/store"
)

// FuzzPageToken: a page token is caller input. Opening any string never
// panics, and a string accepted as a token is one the server issued for
// that request (altered tokens are refused).
func FuzzPageToken(f *testing.F) {
	tokens := newPageTokens([]byte("fuzz-key-0123456789-0123456789-0"))
	q := store.MessageQuery{GroupID: []byte("g")}
	issued := tokens.messages("alice", q, store.MessageCursor{SentAtNs: 5, ID: []byte("m1")})
	f.Add(issued)
	f.Add(tokens.groups("alice", []byte("g")))
	f.Add(tokens.consent("alice", store.ConsentKey{EntityType: 1, Entity: "x"}))
	f.Add("")
	f.Add("!!")
	f.Add("bQ")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := tokens.parseMessages("alice", q, token)
		if err == nil && token != "" && token != issued {
			// Only the issued token (or its other base64 spellings, which
			// decode to the same bytes) opens.
			if c == nil || c.SentAtNs != 5 || string(c.ID) != "m1" {
				t.Fatalf("an altered token %q opened to %+v", token, c)
			}
		}
		_, _ = tokens.parseGroups("alice", token)
		_, _ = tokens.parseConsent("alice", token)
	})
}

// FuzzListFilter: ListOperations' filter parser never panics, and what it
// accepts names only the fields it knows.
func FuzzListFilter(f *testing.F) {
	for _, seed := range []string{"", `owner = "alice"`, `done = true`, `owner="a" AND done=false`, `state = 1`, `owner = alice`, `owner = "`, " AND "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, filter string) {
		lf, err := parseFilter(filter)
		if err != nil {
			return
		}
		if lf.owner != "" && !strings.Contains(filter, lf.owner) {
			t.Fatalf("parseFilter(%q) gave owner %q", filter, lf.owner)
		}
	})
}

// TestPageTokensHideTheirCursor: a page token shows nothing of its
// cursor (issue 33, finding 9: a ListOperations token filtered on another
// owner carried that owner's operation id in clear), and two tokens of
// one cursor differ.
func TestPageTokensHideTheirCursor(t *testing.T) {
	tokens := newPageTokens([]byte("k"))
	id := []byte("18ee300090a03c2d768ceeb08bf5388a")
	a, b := tokens.issue(tokenGroups, ownerBinding("bob"), id), tokens.issue(tokenGroups, ownerBinding("bob"), id)
	for _, tok := range []string{a, b} {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, id) || bytes.Contains(raw, id[:8]) || strings.Contains(tok, string(id[:8])) {
			t.Errorf("token %s shows its cursor", tok)
		}
	}
	if a == b {
		t.Error("two tokens of one cursor are equal: the cursor is not sealed under a fresh nonce")
	}
	if got, err := tokens.open(tokenGroups, ownerBinding("bob"), a); err != nil || !bytes.Equal(got, id) {
		t.Fatalf("open: %q, %v", got, err)
	}
	if _, err := tokens.open(tokenGroups, ownerBinding("alice"), a); err == nil {
		t.Error("a token opened for another owner")
	}
}
