package pagetoken

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
	tokens := New([]byte("fuzz-key-0123456789-0123456789-0"))
	q := store.MessageQuery{GroupID: []byte("g")}
	issued := tokens.MessagesToken("p", "alice", q, store.MessageCursor{SentAtNs: 5, ID: []byte("m1")})
	f.Add(issued)
	f.Add(tokens.GroupsToken("p", "alice", []byte("g")))
	f.Add(tokens.ConsentToken("p", "alice", store.ConsentKey{EntityType: 1, Entity: "x"}))
	f.Add("")
	f.Add("!!")
	f.Add("bQ")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := tokens.OpenMessages("p", "alice", q, token)
		if err == nil && token != "" && token != issued {
			// Only the issued token (or its other base64 spellings, which
			// decode to the same bytes) opens.
			if c == nil || c.SentAtNs != 5 || string(c.ID) != "m1" {
				t.Fatalf("an altered token %q opened to %+v", token, c)
			}
		}
		_, _ = tokens.OpenGroups("p", "alice", token)
		_, _ = tokens.OpenConsent("p", "alice", token)
	})
}

// TestTokensHideTheirCursor: a page token shows nothing of its cursor
// (issue 33, finding 9: a ListOperations token filtered on another owner
// carried that owner's operation id in clear), and two tokens of one
// cursor differ.
func TestTokensHideTheirCursor(t *testing.T) {
	tokens := New([]byte("k"))
	id := []byte("18ee300090a03c2d768ceeb08bf5388a")
	a, b := tokens.Seal("p", Operations, OwnerBinding("bob"), id), tokens.Seal("p", Operations, OwnerBinding("bob"), id)
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
	if got, err := tokens.Open("p", Operations, OwnerBinding("bob"), a); err != nil || !bytes.Equal(got, id) {
		t.Fatalf("open: %q, %v", got, err)
	}
}

// TestTokensAreBound: a token opens only for the principal, the list and
// the request it was issued for, under the key that sealed it.
func TestTokensAreBound(t *testing.T) {
	tokens := New([]byte("k"))
	tok := tokens.Seal("alice", Groups, OwnerBinding("bob"), []byte("g1"))
	for name, open := range map[string]func() ([]byte, error){
		"another principal": func() ([]byte, error) { return tokens.Open("mallory", Groups, OwnerBinding("bob"), tok) },
		"another owner":     func() ([]byte, error) { return tokens.Open("alice", Groups, OwnerBinding("carol"), tok) },
		"another list":      func() ([]byte, error) { return tokens.Open("alice", Consent, OwnerBinding("bob"), tok) },
		"another key":       func() ([]byte, error) { return New([]byte("k2")).Open("alice", Groups, OwnerBinding("bob"), tok) },
		"one byte changed": func() ([]byte, error) {
			raw, _ := base64.RawURLEncoding.DecodeString(tok)
			raw[len(raw)-1] ^= 1
			return tokens.Open("alice", Groups, OwnerBinding("bob"), base64.RawURLEncoding.EncodeToString(raw))
		},
	} {
		if _, err := open(); err != ErrBad {
			t.Errorf("%s: %v, want ErrBad", name, err)
		}
	}
	if got, err := tokens.Open("alice", Groups, OwnerBinding("bob"), tok); err != nil || string(got) != "g1" {
		t.Errorf("the request it was issued for: %q, %v", got, err)
	}
	if _, err := tokens.Open("alice", Groups, nil, strings.Repeat("A", MaxLen+1)); err == nil || err == ErrBad {
		t.Errorf("a token past MaxLen: %v, want an error naming the length", err)
	}
}
