// Package authtest plays an identity provider in tests: ES256 signing keys,
// their JWKS, and signed JWTs.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// NewKey makes a P-256 signing key with key id kid, and its public half.
func NewKey(t testing.TB, kid string) (priv, pub jwk.Key) {
	t.Helper()
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if priv, err = jwk.Import(raw); err != nil {
		t.Fatal(err)
	}
	_ = priv.Set(jwk.KeyIDKey, kid)
	_ = priv.Set(jwk.AlgorithmKey, jwa.ES256())
	if pub, err = jwk.PublicKeyOf(priv); err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// JWKS is the JSON of a key set holding keys.
func JWKS(t testing.TB, keys ...jwk.Key) []byte {
	t.Helper()
	set := jwk.NewSet()
	for _, k := range keys {
		if err := set.AddKey(k); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Sign builds the token b describes and signs it with key.
func Sign(t testing.TB, key jwk.Key, b *jwt.Builder) string {
	t.Helper()
	tok, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), key))
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}
