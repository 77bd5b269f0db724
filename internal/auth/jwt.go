package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"
)

// JWTConfig says which JWTs prove a principal: signed by a key of the JWKS,
// from Issuer, for Audience, unexpired.
type JWTConfig struct {
	// JWKS is a file path or an http(s) URL of the identity provider's keys.
	JWKS     string
	Issuer   string
	Audience string
	// OwnerClaim names the claim holding the owner (a string) or owners (a
	// list of strings) the token may name. "*" is refused: only the policy
	// file makes operators.
	OwnerClaim string
	// ScopeClaim names the claim holding scopes: a space-separated string
	// (OAuth 2.0 "scope") or a list of strings ("scp").
	ScopeClaim string
	// Refresh is how often the JWKS is fetched or the file re-read.
	Refresh time.Duration
	// Leeway tolerates clock skew on exp, nbf and iat.
	Leeway time.Duration
}

// JWTVerifier verifies bearer JWTs against a cached, rotated JWKS.
type JWTVerifier struct {
	cfg  JWTConfig
	keys func(context.Context) (jwk.Set, error)
}

// NewJWTVerifier starts fetching the JWKS; the background refresh stops
// when ctx is done. The first fetch must succeed, so a typo in the URL
// fails at start rather than on the first call.
func NewJWTVerifier(ctx context.Context, cfg JWTConfig, log *zap.Logger) (*JWTVerifier, error) {
	if cfg.JWKS == "" || cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("jwt: the JWKS, the issuer and the audience are all required")
	}
	if cfg.OwnerClaim == "" {
		cfg.OwnerClaim = "owner"
	}
	if cfg.ScopeClaim == "" {
		cfg.ScopeClaim = "scope"
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 5 * time.Minute
	}
	v := &JWTVerifier{cfg: cfg}
	if strings.HasPrefix(cfg.JWKS, "https://") || strings.HasPrefix(cfg.JWKS, "http://") {
		cache, err := jwk.NewCache(ctx, httprc.NewClient())
		if err != nil {
			return nil, fmt.Errorf("jwt: jwks cache: %w", err)
		}
		err = cache.Register(ctx, cfg.JWKS,
			jwk.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}),
			jwk.WithMinInterval(cfg.Refresh), jwk.WithMaxInterval(cfg.Refresh))
		if err != nil {
			return nil, fmt.Errorf("jwt: fetch jwks: %w", err)
		}
		cached, err := cache.CachedSet(cfg.JWKS)
		if err != nil {
			return nil, fmt.Errorf("jwt: jwks: %w", err)
		}
		v.keys = func(context.Context) (jwk.Set, error) { return cached, nil }
		return v, nil
	}
	f := &jwksFile{path: cfg.JWKS, log: log}
	if _, err := f.reload(); err != nil {
		return nil, err
	}
	go f.watch(ctx, cfg.Refresh)
	v.keys = func(context.Context) (jwk.Set, error) { return f.set.Load().(jwk.Set), nil }
	return v, nil
}

// Verify returns the principal a JWT proves, or an error saying in a few
// words why it does not (expired, wrong audience, ...), safe to send.
func (v *JWTVerifier) Verify(ctx context.Context, token string) (*Principal, error) {
	set, err := v.keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: keys unavailable", ErrInvalidCredentials)
	}
	tok, err := jwt.ParseString(token,
		jwt.WithKeySet(set),
		jwt.WithValidate(true),
		jwt.WithIssuer(v.cfg.Issuer),
		jwt.WithAudience(v.cfg.Audience),
		jwt.WithRequiredClaim("exp"),
		jwt.WithRequiredClaim("sub"),
		jwt.WithAcceptableSkew(v.cfg.Leeway),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidCredentials, jwtReason(err))
	}
	sub, _ := tok.Subject()
	p := &Principal{Name: "jwt:" + truncate(sub, 128), Method: "jwt"}
	scopes, err := stringsClaim(tok, v.cfg.ScopeClaim, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
	}
	var granted []Scope
	for _, s := range scopes {
		// Scopes meant for other services share the token; ignore them.
		if sc, err := parseScope(s); err == nil {
			granted = append(granted, sc)
		}
	}
	p.Scopes = scopeSet(granted)
	owners, err := stringsClaim(tok, v.cfg.OwnerClaim, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
	}
	for _, o := range owners {
		if o == "*" || o == "" {
			return nil, fmt.Errorf("%w: claim %s may name owners, not every owner", ErrInvalidCredentials, v.cfg.OwnerClaim)
		}
	}
	p.Owners = OwnerList(owners...)
	return p, nil
}

func jwtReason(err error) string {
	switch {
	case errors.Is(err, jwt.TokenExpiredError()):
		return "token expired"
	case errors.Is(err, jwt.TokenNotYetValidError()):
		return "token not yet valid"
	case errors.Is(err, jwt.InvalidAudienceError()):
		return "token is for another audience"
	case errors.Is(err, jwt.InvalidIssuerError()):
		return "token from another issuer"
	case errors.Is(err, jwt.MissingRequiredClaimError()):
		return "token lacks a required claim (exp, sub)"
	}
	return "token signature or format not valid"
}

// stringsClaim reads a claim that is a string (split on spaces when split
// is set, as OAuth's "scope") or a list of strings.
func stringsClaim(tok jwt.Token, name string, split bool) ([]string, error) {
	if !tok.Has(name) {
		return nil, nil
	}
	var raw any
	if err := tok.Get(name, &raw); err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	switch v := raw.(type) {
	case string:
		if split {
			return strings.Fields(v), nil
		}
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("claim %s: not a list of strings", name)
			}
			out = append(out, s)
		}
		return out, nil
	case []string:
		return v, nil
	}
	return nil, fmt.Errorf("claim %s: neither a string nor a list of strings", name)
}

// jwksFile is a JWKS read from disk and re-read when its content changes.
type jwksFile struct {
	path   string
	log    *zap.Logger
	set    atomic.Value // jwk.Set
	digest [sha256.Size]byte
}

func (f *jwksFile) reload() (bool, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return false, fmt.Errorf("jwt: read jwks %s: %w", f.path, err)
	}
	sum := sha256.Sum256(data)
	if f.set.Load() != nil && sum == f.digest {
		return false, nil
	}
	set, err := jwk.Parse(data)
	if err != nil {
		return false, fmt.Errorf("jwt: parse jwks %s: %w", f.path, err)
	}
	f.set.Store(set)
	f.digest = sum
	return true, nil
}

func (f *jwksFile) watch(ctx context.Context, every time.Duration) {
	watchFile(ctx, every, nil, f.reload, f.log, "jwks", f.path)
}
