// Package auth proves who a caller is and what it may do: principals with
// scopes and an owner set, resolved from a bearer token (a hashed token in
// the policy file, or a JWT verified against a JWKS) or from a verified
// client certificate. It knows nothing of gRPC methods; the server maps
// each method to the scope it needs.
package auth

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Scope names a family of RPCs a principal may call.
type Scope string

// The scopes. Admin implies every other scope, including AnySender.
const (
	ScopeContent            Scope = "content"
	ScopeConversationsRead  Scope = "conversations.read"
	ScopeConversationsWrite Scope = "conversations.write"
	// ScopeAnySender lets a principal append messages under any sender and
	// delete as any actor: the backend that relays network messages.
	ScopeAnySender     Scope = "conversations.write.any_sender"
	ScopeArchiveExport Scope = "archive.export"
	ScopeArchiveImport Scope = "archive.import"
	// ScopeArchiveMigrate lets a principal restore one owner's backup
	// into another owner (account migration); it still needs
	// archive.import for both.
	ScopeArchiveMigrate Scope = "archive.migrate"
	ScopeAdmin          Scope = "admin"
	// ScopeOwnersErase lets a principal erase an owner everywhere. No
	// other scope implies it, admin included: erasure cannot be undone,
	// so a policy grants it by name or not at all.
	ScopeOwnersErase Scope = "owners.erase"
	// ScopeOwnersHold lets a principal place and lift legal holds.
	ScopeOwnersHold Scope = "owners.hold"
)

// KnownScopes lists every scope a policy or token may grant.
var KnownScopes = []Scope{
	ScopeContent, ScopeConversationsRead, ScopeConversationsWrite, ScopeAnySender,
	ScopeArchiveExport, ScopeArchiveImport, ScopeArchiveMigrate, ScopeAdmin, ScopeOwnersErase, ScopeOwnersHold,
}

func parseScope(s string) (Scope, error) {
	sc := Scope(s)
	if !slices.Contains(KnownScopes, sc) {
		return "", fmt.Errorf("unknown scope %q", truncate(s, 64))
	}
	return sc, nil
}

// Owners is the set of owners a principal may name in a request.
type Owners struct {
	// All is set for operators: every owner, present and future.
	All  bool
	list map[string]struct{}
}

// AllOwners is the owner set of an operator.
func AllOwners() Owners { return Owners{All: true} }

// OwnerList is a fixed set of owners.
func OwnerList(owners ...string) Owners {
	o := Owners{list: make(map[string]struct{}, len(owners))}
	for _, v := range owners {
		o.list[v] = struct{}{}
	}
	return o
}

// Contains reports whether owner is in the set.
func (o Owners) Contains(owner string) bool {
	if o.All {
		return true
	}
	_, ok := o.list[owner]
	return ok
}

// String lists the set for logs: "*" or the sorted owners.
func (o Owners) String() string {
	if o.All {
		return "*"
	}
	l := make([]string, 0, len(o.list))
	for k := range o.list {
		l = append(l, k)
	}
	sort.Strings(l)
	return strings.Join(l, ",")
}

// Principal is a proven caller.
type Principal struct {
	// Name identifies the principal in logs and errors: the policy entry's
	// name, "jwt:" and the token's subject, never a credential.
	Name string
	// Method is how the principal was proven: "token", "jwt" or "certificate".
	Method string
	Scopes map[Scope]bool
	Owners Owners
}

// Has reports whether the principal holds scope (admin holds every scope).
func (p *Principal) Has(s Scope) bool {
	return p != nil && (p.Scopes[s] || p.Scopes[ScopeAdmin] && s != ScopeOwnersErase)
}

// MayActAs reports whether the principal may name actor as the sender or
// deleting inbox in a request for owner. A principal bound to a list of
// owners acts only as the owner it names, unless it holds ScopeAnySender;
// an operator (every owner) acts as anyone, as it may already import any
// archive.
func (p *Principal) MayActAs(owner, actor string) bool {
	return actor == owner || p.Owners.All || p.Has(ScopeAnySender)
}

func scopeSet(scopes []Scope) map[Scope]bool {
	m := make(map[Scope]bool, len(scopes))
	for _, s := range scopes {
		m[s] = true
	}
	return m
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal proven for this call, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// truncate keeps error messages from echoing large caller input.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
