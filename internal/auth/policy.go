package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
)

// PolicyFile is the YAML an operator writes. Tokens appear only as SHA-256
// hex digests, so the file can be read by more people than the tokens.
//
//	principals:
//	  - name: ops
//	    tokens_sha256: ["<64 hex digits>"]
//	    scopes: [admin]
//	    owners: ["*"]
//	  - name: relay
//	    certificates: ["CN=relay.internal", "spiffe://example.org/relay"]
//	    scopes: [conversations.read, conversations.write, conversations.write.any_sender]
//	    owners: ["*"]
type PolicyFile struct {
	Principals []PolicyPrincipal `yaml:"principals"`
}

// PolicyPrincipal is one principal of the policy file.
type PolicyPrincipal struct {
	Name string `yaml:"name"`
	// TokensSHA256 are hex SHA-256 digests of the bearer tokens that prove
	// this principal (printf %s "$TOKEN" | sha256sum).
	TokensSHA256 []string `yaml:"tokens_sha256"`
	// Certificates are client certificate identities: the subject as Go
	// prints it (CN=relay,O=Example) or any one SAN (DNS name, URI, email
	// address, IP address).
	Certificates []string `yaml:"certificates"`
	Scopes       []string `yaml:"scopes"`
	// Owners lists the owners the principal may name; ["*"] is every owner.
	Owners []string `yaml:"owners"`
}

// Policy is a parsed, validated policy file.
type Policy struct {
	tokens []tokenEntry
	certs  map[string]*Principal
	// disabled names the principals no credential proves.
	disabled []string
}

// Disabled names the principals the policy lists with no credential: no
// call is ever theirs.
func (p *Policy) Disabled() []string { return p.disabled }

type tokenEntry struct {
	digest    [sha256.Size]byte
	principal *Principal
}

// ParsePolicy parses and validates a policy file. Unknown keys, unknown
// scopes, malformed digests, duplicate names or identities and empty owner
// sets are errors, so a typo never silently grants or revokes access.
func ParsePolicy(data []byte) (*Policy, error) {
	var f PolicyFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// An empty file is an empty policy: it grants nothing.
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p := &Policy{certs: map[string]*Principal{}}
	names := map[string]bool{}
	digests := map[[sha256.Size]byte]string{}
	for i, fp := range f.Principals {
		at := fmt.Sprintf("policy: principals[%d]", i)
		if fp.Name == "" {
			return nil, fmt.Errorf("%s: name is required", at)
		}
		if names[fp.Name] {
			return nil, fmt.Errorf("%s: name %q is used twice", at, fp.Name)
		}
		names[fp.Name] = true
		if len(fp.TokensSHA256) == 0 && len(fp.Certificates) == 0 {
			// Revocation: a principal whose last credential was removed
			// stays valid and is proven by nothing, so the reload that
			// removes it takes effect rather than being refused.
			p.disabled = append(p.disabled, fp.Name)
		}
		var scopes []Scope
		for _, s := range fp.Scopes {
			sc, err := parseScope(s)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", at, fp.Name, err)
			}
			scopes = append(scopes, sc)
		}
		if len(scopes) == 0 {
			return nil, fmt.Errorf("%s (%s): scopes are required", at, fp.Name)
		}
		owners, err := parseOwners(fp.Owners)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", at, fp.Name, err)
		}
		pr := &Principal{Name: fp.Name, Scopes: scopeSet(scopes), Owners: owners}
		for _, h := range fp.TokensSHA256 {
			raw, err := hex.DecodeString(strings.TrimSpace(h))
			if err != nil || len(raw) != sha256.Size {
				return nil, fmt.Errorf("%s (%s): tokens_sha256 entry is not 64 hex digits", at, fp.Name)
			}
			d := [sha256.Size]byte(raw)
			if other, dup := digests[d]; dup {
				return nil, fmt.Errorf("%s (%s): a token digest is also listed for %s", at, fp.Name, other)
			}
			digests[d] = fp.Name
			tp := *pr
			tp.Method = "token"
			p.tokens = append(p.tokens, tokenEntry{digest: d, principal: &tp})
		}
		for _, c := range fp.Certificates {
			if c == "" {
				return nil, fmt.Errorf("%s (%s): an empty certificate identity", at, fp.Name)
			}
			if _, dup := p.certs[c]; dup {
				return nil, fmt.Errorf("%s (%s): certificate identity %q is listed twice", at, fp.Name, c)
			}
			cp := *pr
			cp.Method = "certificate"
			p.certs[c] = &cp
		}
	}
	return p, nil
}

func parseOwners(list []string) (Owners, error) {
	if len(list) == 0 {
		return Owners{}, errors.New(`owners are required (a list, or ["*"] for every owner)`)
	}
	for _, o := range list {
		if o == "*" {
			if len(list) != 1 {
				return Owners{}, errors.New(`owners: "*" stands alone`)
			}
			return AllOwners(), nil
		}
		if o == "" {
			return Owners{}, errors.New("owners: an empty owner")
		}
	}
	return OwnerList(list...), nil
}

// TokenDigest is the digest a policy file lists for token.
func TokenDigest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// byToken finds the principal whose digest matches token. Every entry is
// compared, in constant time, so the time taken says nothing about which
// digest came close.
func (p *Policy) byToken(token string) *Principal {
	d := sha256.Sum256([]byte(token))
	var found *Principal
	for i := range p.tokens {
		if subtle.ConstantTimeCompare(d[:], p.tokens[i].digest[:]) == 1 {
			found = p.tokens[i].principal
		}
	}
	return found
}

// byCertificate finds the principal of the first identity of a verified
// client certificate that the policy lists.
func (p *Policy) byCertificate(ids []string) *Principal {
	for _, id := range ids {
		if pr, ok := p.certs[id]; ok {
			return pr
		}
	}
	return nil
}

// PolicySource holds the policy in force, replaced whole on reload, so a
// call sees either the old policy or the new one, never a mix.
type PolicySource struct {
	path    string
	current atomic.Pointer[Policy]
	digest  atomic.Value // [32]byte of the file last loaded
	log     *zap.Logger

	loadedAt atomic.Int64  // unix ns of the last load that took effect
	failures atomic.Uint64 // reloads refused since start
	failing  atomic.Value  // string: why the latest reload was refused; "" once one succeeds
}

// PolicyStatus says whether the file on disk is the policy in force.
type PolicyStatus struct {
	// LoadedAt is when the policy in force was loaded.
	LoadedAt time.Time
	// Failures counts the reloads refused since the server started.
	Failures uint64
	// Failing, when not empty, is why the latest reload was refused: the
	// file on disk is not in force, and the older policy still is.
	Failing string
}

// Status reports the policy's loads.
func (s *PolicySource) Status() PolicyStatus {
	st := PolicyStatus{Failures: s.failures.Load()}
	if ns := s.loadedAt.Load(); ns != 0 {
		st.LoadedAt = time.Unix(0, ns)
	}
	st.Failing, _ = s.failing.Load().(string)
	return st
}

// CheckPolicyFile parses the policy file at path as a reload would, for
// an operator to run before SIGHUP; it returns the policy's disabled
// principals.
func CheckPolicyFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", path, err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p.Disabled(), nil
}

// LoadPolicy reads the policy file at path.
func LoadPolicy(path string, log *zap.Logger) (*PolicySource, error) {
	s := &PolicySource{path: path, log: log}
	if _, err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// StaticPolicy serves a fixed policy (tests, the development token).
func StaticPolicy(p *Policy) *PolicySource {
	s := &PolicySource{log: zap.NewNop()}
	s.current.Store(p)
	return s
}

// Policy returns the policy in force.
func (s *PolicySource) Policy() *Policy { return s.current.Load() }

// Reload reads the file again. A file that does not parse leaves the
// policy in force unchanged; changed reports whether a new one took effect.
func (s *PolicySource) Reload() (changed bool, err error) {
	if s.path == "" {
		return false, nil
	}
	changed, err = s.reload()
	if err != nil {
		s.failures.Add(1)
		s.failing.Store(err.Error())
		return false, err
	}
	s.failing.Store("")
	return changed, nil
}

func (s *PolicySource) reload() (bool, error) {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return false, fmt.Errorf("policy: read %s: %w", s.path, err)
	}
	sum := sha256.Sum256(data)
	if old, ok := s.digest.Load().([sha256.Size]byte); ok && old == sum {
		return false, nil
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", s.path, err)
	}
	s.current.Store(p)
	s.digest.Store(sum)
	s.loadedAt.Store(time.Now().UnixNano())
	for _, name := range p.Disabled() {
		s.log.Info("policy principal disabled: no credential proves it", zap.String("principal", name))
	}
	return true, nil
}

// Watch reloads the file every interval until ctx is done, and at once
// whenever reload receives. Polling the content catches every way a file
// changes, including the symlink swap Kubernetes uses for mounted Secrets,
// which file-event watchers miss.
func (s *PolicySource) Watch(ctx context.Context, interval time.Duration, reload <-chan struct{}) {
	if s.path == "" {
		return
	}
	watchFile(ctx, interval, reload, s.Reload, s.log, "policy", s.path)
}

// watchFile calls reload every interval and whenever now receives, until
// ctx is done, logging what changed and what failed to load (the file in
// force stays in force).
func watchFile(ctx context.Context, interval time.Duration, now <-chan struct{}, reload func() (bool, error), log *zap.Logger, what, path string) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-now:
		}
		changed, err := reload()
		switch {
		case err != nil:
			log.Error(what+" reload failed; the previous one stays in force", zap.Error(err))
		case changed:
			log.Info(what+" reloaded", zap.String("path", path))
		}
	}
}
