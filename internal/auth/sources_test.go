package auth

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/auth/authtest"
	"github.com/contentbackup/contentbackup/internal/eventually"
)

// TestAuthenticatorSources: an authenticator needs a policy or a JWKS, and
// either alone works; a bearer token shaped like a JWT, with no JWKS, is
// an unknown token, and with one it is verified as a JWT.
func TestAuthenticatorSources(t *testing.T) {
	if _, err := NewAuthenticator(nil, nil); err == nil {
		t.Error("an authenticator with neither a policy nor a JWKS")
	}
	k, pub := authtest.NewKey(t, "k")
	path := t.TempDir() + "/jwks.json"
	if err := writeFile(path, authtest.JWKS(t, pub)); err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTVerifier(t.Context(), JWTConfig{JWKS: path, Issuer: "https://idp.test", Audience: "contentbackup"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	jwtOnly, err := NewAuthenticator(nil, v)
	if err != nil {
		t.Fatalf("a JWKS alone: %v", err)
	}
	token := signed(t, k, "alice", "content")
	if p, err := jwtOnly.Authenticate(t.Context(), "Bearer "+token, nil); err != nil || p.Method != "jwt" {
		t.Errorf("a JWT with a JWKS: %+v, %v", p, err)
	}
	pol, err := ParsePolicy([]byte("principals:\n  - {name: a, tokens_sha256: [" + digestA + "], scopes: [content], owners: [o]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	policyOnly, err := NewAuthenticator(StaticPolicy(pol), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policyOnly.Authenticate(t.Context(), "Bearer "+token, nil); !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), "unknown bearer token") {
		t.Errorf("a JWT without a JWKS: %v; want an unknown bearer token", err)
	}
}

// TestPolicyDisabledPrincipals: a principal no credential proves is
// listed as disabled; one with only tokens or only certificates is not.
func TestPolicyDisabledPrincipals(t *testing.T) {
	pol, err := ParsePolicy([]byte(`
principals:
  - {name: tokens, tokens_sha256: [` + digestA + `], scopes: [content], owners: [o]}
  - {name: certificates, certificates: [CN=c], scopes: [content], owners: [o]}
  - {name: revoked, scopes: [content], owners: [o]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.Disabled(); !slices.Equal(got, []string{"revoked"}) {
		t.Errorf("disabled %v; want [revoked]", got)
	}
}

// TestJWKSFileRotation: a JWKS file rewritten with a new key is read
// again at the next refresh, and a token of the new key is then accepted.
func TestJWKSFileRotation(t *testing.T) {
	_, pub1 := authtest.NewKey(t, "k1")
	k2, pub2 := authtest.NewKey(t, "k2")
	path := t.TempDir() + "/jwks.json"
	if err := writeFile(path, authtest.JWKS(t, pub1)); err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTVerifier(t.Context(), JWTConfig{JWKS: path, Issuer: "https://idp.test", Audience: "contentbackup", Refresh: 50 * time.Millisecond}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	rotated := signed(t, k2, "alice", "content")
	if _, err := v.Verify(t.Context(), rotated); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("a token of a key not yet in the file: %v", err)
	}
	if err := writeFile(path, authtest.JWKS(t, pub1, pub2)); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, func() bool {
		_, err := v.Verify(t.Context(), rotated)
		return err == nil
	}, func() string { return "the rewritten JWKS file was not read again" })
}

// TestTruncate: a message part at the limit is kept whole; one past it
// is cut there and marked.
func TestTruncate(t *testing.T) {
	if got := truncate("abcd", 4); got != "abcd" {
		t.Errorf("at the limit: %q", got)
	}
	if got := truncate("abcde", 4); got != "abcd…" {
		t.Errorf("past the limit: %q", got)
	}
}
