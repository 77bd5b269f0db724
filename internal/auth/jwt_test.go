package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/auth/authtest"
	"github.com/contentbackup/contentbackup/internal/eventually"
)

func signed(t *testing.T, key jwk.Key, owner any, scope string) string {
	return authtest.Sign(t, key, jwt.NewBuilder().Issuer("https://idp.test").Audience([]string{"contentbackup"}).Subject("svc").
		Expiration(time.Now().Add(time.Hour)).Claim("owner", owner).Claim("scope", scope))
}

// TestJWTFromJWKSURL: keys come from an https-style JWKS URL (a loopback
// test server), are cached, and a key the provider adds later is picked up
// at the next refresh, without a restart.
func TestJWTFromJWKSURL(t *testing.T) {
	k1, pub1 := authtest.NewKey(t, "k1")
	k2, pub2 := authtest.NewKey(t, "k2")
	var mu sync.Mutex
	body := authtest.JWKS(t, pub1)
	fetches := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fetches++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	v, err := NewJWTVerifier(t.Context(), JWTConfig{JWKS: srv.URL, Issuer: "https://idp.test", Audience: "contentbackup", Refresh: time.Second}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(t.Context(), signed(t, k1, []string{"alice", "bob"}, "conversations.read unrelated.scope"))
	if err != nil || p.Name != "jwt:svc" || !p.Owners.Contains("bob") || p.Owners.Contains("carol") || !p.Has(ScopeConversationsRead) || p.Has(ScopeConversationsWrite) {
		t.Fatalf("a token of k1: %+v %v", p, err)
	}
	rotated := signed(t, k2, "alice", "content")
	if _, err := v.Verify(t.Context(), rotated); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("a token of a key not yet published: %v", err)
	}
	mu.Lock()
	body = authtest.JWKS(t, pub1, pub2)
	mu.Unlock()
	eventually.True(t, 15*time.Second, func() bool {
		_, err := v.Verify(t.Context(), rotated)
		return err == nil
	}, func() string { return "the rotated key was not picked up" })
}

func TestJWTRefusals(t *testing.T) {
	k, pub := authtest.NewKey(t, "k")
	path := t.TempDir() + "/jwks.json"
	if err := writeFile(path, authtest.JWKS(t, pub)); err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTVerifier(t.Context(), JWTConfig{JWKS: path, Issuer: "https://idp.test", Audience: "contentbackup"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	noExpSigned := authtest.Sign(t, k, jwt.NewBuilder().Issuer("https://idp.test").Audience([]string{"contentbackup"}).Subject("s"))
	for name, tc := range map[string]struct{ token, want string }{
		"every owner":    {signed(t, k, "*", "admin"), "not every owner"},
		"owner not text": {signed(t, k, 7, "admin"), "claim owner"},
		"no exp":         {noExpSigned, "required claim"},
		"not a JWT":      {"a.b.c", "signature or format"},
		"alg none":       {"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJzIn0.", "signature or format"},
	} {
		_, err := v.Verify(t.Context(), tc.token)
		if !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want mentioning %q", name, err, tc.want)
		}
	}
	if _, err := NewJWTVerifier(t.Context(), JWTConfig{JWKS: path}, zap.NewNop()); err == nil {
		t.Error("a verifier without issuer and audience")
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }
