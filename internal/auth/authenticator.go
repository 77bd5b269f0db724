package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// Errors of authentication. Their messages are safe to send to the caller:
// they never carry the credential.
var (
	// ErrNoCredentials: the call carried neither a bearer token nor a
	// verified client certificate.
	ErrNoCredentials = errors.New("no credentials: send 'authorization: Bearer <token>' or a client certificate")
	// ErrInvalidCredentials: a credential was sent and proves nobody.
	ErrInvalidCredentials = errors.New("credentials not valid")
)

// Authenticator resolves a call's credentials to a principal through the
// policy file and, when configured, JWTs.
type Authenticator struct {
	policy *PolicySource
	jwt    *JWTVerifier
}

// NewAuthenticator combines the sources; either may be nil, not both.
func NewAuthenticator(policy *PolicySource, jwtv *JWTVerifier) (*Authenticator, error) {
	if policy == nil && jwtv == nil {
		return nil, errors.New("auth: neither a policy file nor a JWKS is configured")
	}
	return &Authenticator{policy: policy, jwt: jwtv}, nil
}

// Authenticate returns the principal proven by authorization (the whole
// header value, "Bearer <token>") or, when there is none, by the leaf of a
// client certificate chain the TLS layer has already verified.
func (a *Authenticator) Authenticate(ctx context.Context, authorization string, verifiedLeaf *x509.Certificate) (*Principal, error) {
	if authorization != "" {
		scheme, token, ok := strings.Cut(authorization, " ")
		if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
			return nil, fmt.Errorf("%w: authorization must be 'Bearer <token>'", ErrInvalidCredentials)
		}
		return a.byToken(ctx, strings.TrimSpace(token))
	}
	if verifiedLeaf != nil {
		if a.policy != nil {
			if p := a.policy.Policy().byCertificate(CertificateIdentities(verifiedLeaf)); p != nil {
				return p, nil
			}
		}
		return nil, fmt.Errorf("%w: the client certificate names no principal of the policy", ErrInvalidCredentials)
	}
	return nil, ErrNoCredentials
}

func (a *Authenticator) byToken(ctx context.Context, token string) (*Principal, error) {
	if a.policy != nil {
		if p := a.policy.Policy().byToken(token); p != nil {
			return p, nil
		}
	}
	if a.jwt != nil && strings.Count(token, ".") == 2 {
		return a.jwt.Verify(ctx, token)
	}
	return nil, fmt.Errorf("%w: unknown bearer token", ErrInvalidCredentials)
}

// CertificateIdentities lists the names a certificate may be known by in a
// policy: its subject as Go prints it, then each SAN.
func CertificateIdentities(c *x509.Certificate) []string {
	ids := []string{c.Subject.String()}
	ids = append(ids, c.DNSNames...)
	for _, u := range c.URIs {
		ids = append(ids, u.String())
	}
	ids = append(ids, c.EmailAddresses...)
	for _, ip := range c.IPAddresses {
		ids = append(ids, ip.String())
	}
	return ids
}
