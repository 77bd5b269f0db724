package main

import (
	"testing"

	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// TestDevTokenHoldsEveryScope (issue 51): the development server's token
// holds every scope a policy may grant, owners.erase included (which
// admin does not imply), for every owner, so each thing the README shows
// can be tried on it, an erasure's dry run included.
func TestDevTokenHoldsEveryScope(t *testing.T) {
	dir := t.TempDir()
	policy, err := devPolicy(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	token, err := transport.ReadToken(dir + "/" + devTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.NewAuthenticator(policy, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := authn.Authenticate(t.Context(), "Bearer "+token, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range auth.KnownScopes {
		if !p.Has(s) {
			t.Errorf("the dev token lacks %s", s)
		}
	}
	if !p.Owners.Contains("any-owner") {
		t.Error("the dev token does not hold every owner")
	}
}
