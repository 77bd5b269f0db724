package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"
)

func signingKey(t *testing.T, kid string) (jwk.Key, jwk.Key) {
	t.Helper()
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := jwk.Import(raw)
	if err != nil {
		t.Fatal(err)
	}
	_ = k.Set(jwk.KeyIDKey, kid)
	_ = k.Set(jwk.AlgorithmKey, jwa.ES256())
	pub, err := jwk.PublicKeyOf(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, pub
}

func jwksJSON(t *testing.T, keys ...jwk.Key) []byte {
	t.Helper()
	set := jwk.NewSet()
	for _, k := range keys {
		_ = set.AddKey(k)
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func signed(t *testing.T, key jwk.Key, owner any, scope string) string {
	t.Helper()
	tok, err := jwt.NewBuilder().Issuer("https://idp.test").Audience([]string{"contentbackup"}).Subject("svc").
		Expiration(time.Now().Add(time.Hour)).Claim("owner", owner).Claim("scope", scope).Build()
	if err != nil {
		t.Fatal(err)
	}
	b, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), key))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJWTFromJWKSURL: keys come from an https-style JWKS URL (a loopback
// test server), are cached, and a key the provider adds later is picked up
// at the next refresh, without a restart.
func TestJWTFromJWKSURL(t *testing.T) {
	k1, pub1 := signingKey(t, "k1")
	k2, pub2 := signingKey(t, "k2")
	var mu sync.Mutex
	body := jwksJSON(t, pub1)
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
	body = jwksJSON(t, pub1, pub2)
	mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := v.Verify(t.Context(), rotated); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated key was not picked up")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestJWTRefusals(t *testing.T) {
	k, pub := signingKey(t, "k")
	path := t.TempDir() + "/jwks.json"
	if err := writeFile(path, jwksJSON(t, pub)); err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTVerifier(t.Context(), JWTConfig{JWKS: path, Issuer: "https://idp.test", Audience: "contentbackup"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	noExp, _ := jwt.NewBuilder().Issuer("https://idp.test").Audience([]string{"contentbackup"}).Subject("s").Build()
	noExpSigned, _ := jwt.Sign(noExp, jwt.WithKey(jwa.ES256(), k))
	for name, tc := range map[string]struct{ token, want string }{
		"every owner":    {signed(t, k, "*", "admin"), "not every owner"},
		"owner not text": {signed(t, k, 7, "admin"), "claim owner"},
		"no exp":         {string(noExpSigned), "required claim"},
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
