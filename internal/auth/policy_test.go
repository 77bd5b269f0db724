package auth

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

var digestA = TokenDigest("token-a")

func TestParsePolicyRefusesMistakes(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown key":        {"principals:\n  - name: a\n    tokens: [x]\n", "field tokens not found"},
		"unknown scope":      {"principals:\n  - name: a\n    tokens_sha256: [" + digestA + "]\n    scopes: [root]\n    owners: [o]\n", `unknown scope "root"`},
		"no scopes":          {"principals:\n  - name: a\n    tokens_sha256: [" + digestA + "]\n    owners: [o]\n", "scopes are required"},
		"no owners":          {"principals:\n  - name: a\n    tokens_sha256: [" + digestA + "]\n    scopes: [content]\n", "owners are required"},
		"star with others":   {"principals:\n  - name: a\n    tokens_sha256: [" + digestA + "]\n    scopes: [content]\n    owners: ['*', o]\n", `"*" stands alone`},
		"short digest":       {"principals:\n  - name: a\n    tokens_sha256: [abcd]\n    scopes: [content]\n    owners: [o]\n", "not 64 hex digits"},
		"plain token":        {"principals:\n  - name: a\n    tokens_sha256: [my-secret-token]\n    scopes: [content]\n    owners: [o]\n", "not 64 hex digits"},
		"no name":            {"principals:\n  - tokens_sha256: [" + digestA + "]\n    scopes: [content]\n    owners: [o]\n", "name is required"},
		"duplicate name":     {"principals:\n  - {name: a, tokens_sha256: [" + digestA + "], scopes: [content], owners: [o]}\n  - {name: a, certificates: [CN=x], scopes: [content], owners: [o]}\n", "used twice"},
		"duplicate digest":   {"principals:\n  - {name: a, tokens_sha256: [" + digestA + "], scopes: [content], owners: [o]}\n  - {name: b, tokens_sha256: [" + digestA + "], scopes: [content], owners: [o]}\n", "also listed for a"},
		"duplicate identity": {"principals:\n  - {name: a, certificates: [CN=x], scopes: [content], owners: [o]}\n  - {name: b, certificates: [CN=x], scopes: [content], owners: [o]}\n", "listed twice"},
	} {
		_, err := ParsePolicy([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error mentioning %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "my-secret-token") {
			t.Errorf("%s: the error echoes a token: %v", name, err)
		}
	}
	if p, err := ParsePolicy(nil); err != nil || p.byToken("x") != nil {
		t.Errorf("an empty policy: %v", err)
	}
}

func TestAuthenticate(t *testing.T) {
	pol, err := ParsePolicy([]byte(`
principals:
  - name: ops
    tokens_sha256: [` + digestA + `]
    scopes: [admin]
    owners: ["*"]
  - name: relay
    certificates: ["CN=relay,O=Example", "spiffe://example.org/relay"]
    scopes: [conversations.read]
    owners: [alice, bob]
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthenticator(StaticPolicy(pol), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := a.Authenticate(ctx, "Bearer token-a", nil)
	if err != nil || p.Name != "ops" || !p.Has(ScopeArchiveImport) || !p.Owners.Contains("anyone") || p.Method != "token" {
		t.Errorf("ops token: %+v %v", p, err)
	}
	if p, err := a.Authenticate(ctx, "bearer   token-a ", nil); err != nil || p.Name != "ops" {
		t.Errorf("the scheme is case-insensitive: %v", err)
	}
	for name, header := range map[string]string{"unknown": "Bearer token-b", "basic": "Basic dG9rZW4tYQ==", "empty bearer": "Bearer ", "no scheme": "token-a"} {
		if _, err := a.Authenticate(ctx, header, nil); !errors.Is(err, ErrInvalidCredentials) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := a.Authenticate(ctx, "", nil); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("nothing: %v", err)
	}
	subject := &x509.Certificate{Subject: pkix.Name{CommonName: "relay", Organization: []string{"Example"}}}
	if p, err := a.Authenticate(ctx, "", subject); err != nil || p.Name != "relay" || p.Method != "certificate" || p.Has(ScopeConversationsWrite) || p.Owners.Contains("carol") {
		t.Errorf("certificate by subject: %+v %v", p, err)
	}
	u, _ := url.Parse("spiffe://example.org/relay")
	if p, err := a.Authenticate(ctx, "", &x509.Certificate{Subject: pkix.Name{CommonName: "other"}, URIs: []*url.URL{u}}); err != nil || p.Name != "relay" {
		t.Errorf("certificate by URI SAN: %+v %v", p, err)
	}
	if _, err := a.Authenticate(ctx, "", &x509.Certificate{Subject: pkix.Name{CommonName: "relay"}}); !errors.Is(err, ErrInvalidCredentials) {
		t.Errorf("a subject that only shares the CN: %v", err)
	}
}

func TestMayActAs(t *testing.T) {
	single := &Principal{Scopes: scopeSet([]Scope{ScopeConversationsWrite}), Owners: OwnerList("alice")}
	relay := &Principal{Scopes: scopeSet([]Scope{ScopeConversationsWrite, ScopeAnySender}), Owners: OwnerList("alice")}
	ops := &Principal{Scopes: scopeSet([]Scope{ScopeConversationsWrite}), Owners: AllOwners()}
	if !single.MayActAs("alice", "alice") || single.MayActAs("alice", "bob") {
		t.Error("a single-owner principal acts as its owner only")
	}
	if !relay.MayActAs("alice", "bob") || !ops.MayActAs("alice", "bob") {
		t.Error("any_sender and operators act as anyone")
	}
}

func TestPolicyReloadKeepsTheLastGoodPolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	good := "principals:\n  - {name: ops, tokens_sha256: [" + digestA + "], scopes: [admin], owners: ['*']}\n"
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := LoadPolicy(path, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := src.Reload(); changed || err != nil {
		t.Errorf("reload of an unchanged file: %v %v", changed, err)
	}
	if err := os.WriteFile(path, []byte("principals: [{name: x}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Reload(); err == nil {
		t.Error("a bad policy loaded")
	}
	if src.Policy().byToken("token-a") == nil {
		t.Error("the last good policy was dropped")
	}
	if err := os.WriteFile(path, []byte("principals: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := src.Reload(); !changed || err != nil || src.Policy().byToken("token-a") != nil {
		t.Errorf("revocation: %v %v", changed, err)
	}
}

// TestAdminDoesNotImplyErase (issue 37): admin implies every scope but
// owners.erase, which a principal holds only when granted by name.
func TestAdminDoesNotImplyErase(t *testing.T) {
	admin := &Principal{Name: "ops", Scopes: scopeSet([]Scope{ScopeAdmin})}
	for _, s := range KnownScopes {
		if got, want := admin.Has(s), s != ScopeOwnersErase; got != want {
			t.Errorf("admin has %s: %v, want %v", s, got, want)
		}
	}
	dpo := &Principal{Name: "dpo", Scopes: scopeSet([]Scope{ScopeOwnersErase})}
	if !dpo.Has(ScopeOwnersErase) || dpo.Has(ScopeOwnersHold) || dpo.Has(ScopeArchiveExport) {
		t.Errorf("a principal granted owners.erase only: erase %v, hold %v, export %v", dpo.Has(ScopeOwnersErase), dpo.Has(ScopeOwnersHold), dpo.Has(ScopeArchiveExport))
	}
	both := &Principal{Name: "both", Scopes: scopeSet([]Scope{ScopeAdmin, ScopeOwnersErase})}
	if !both.Has(ScopeOwnersErase) {
		t.Error("admin granted owners.erase by name does not have it")
	}
	var none *Principal
	if none.Has(ScopeContent) {
		t.Error("no principal has a scope")
	}
}
