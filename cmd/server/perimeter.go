package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// devTokenFile is where a server with no policy and no JWKS, listening on
// loopback only, keeps the token of its one operator principal.
const devTokenFile = "dev-token"

// perimeter is what stands between the network and the services.
type perimeter struct {
	auth *auth.Authenticator
	// policy is the policy file's source, when one is configured.
	policy *auth.PolicySource
	creds  credentials.TransportCredentials
	// httpTLS is the same TLS for the HTTP/JSON listener.
	httpTLS      *tls.Config
	pageTokenKey []byte
	stops        []func()
}

func (p *perimeter) stop() {
	for _, f := range p.stops {
		f()
	}
}

func (c *serveCmd) perimeter(ctx context.Context, log *zap.Logger) (*perimeter, error) {
	p := &perimeter{}
	ok := false
	defer func() {
		if !ok {
			p.stop()
		}
	}()
	loopback := transport.IsLoopback(c.Listen)

	switch {
	case c.TLSCert != "" || c.TLSKey != "":
		creds, httpTLS, stop, err := transport.ServerTLS(ctx, transport.ServerFiles{
			CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA,
			ClientAuth: transport.ClientAuth(c.TLSClientAuth), Refresh: c.TLSRefresh,
		})
		if err != nil {
			return nil, err
		}
		p.creds, p.httpTLS, p.stops = creds, httpTLS, append(p.stops, stop)
		log.Info("tls", zap.String("cert", c.TLSCert), zap.Bool("client_ca", c.TLSClientCA != ""), zap.String("client_auth", c.TLSClientAuth))
	case c.TLSClientCA != "":
		return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	case !loopback && !c.Insecure:
		return nil, plaintextOffLoopback("--listen", c.Listen, false, false)
	case !loopback:
		log.Warn("serving PLAINTEXT on a non-loopback address (--insecure): credentials and archive keys cross the network in clear unless a mesh encrypts them", zap.String("addr", c.Listen))
	}

	var policy *auth.PolicySource
	if c.AuthPolicy != "" {
		var stop func()
		var err error
		if policy, stop, err = c.watchPolicy(ctx, log); err != nil {
			return nil, err
		}
		p.policy, p.stops = policy, append(p.stops, stop)
	}
	var jwtv *auth.JWTVerifier
	if c.JWKS != "" {
		jctx, cancel := context.WithCancel(ctx)
		p.stops = append(p.stops, cancel)
		var err error
		jwtv, err = auth.NewJWTVerifier(jctx, auth.JWTConfig{
			JWKS: c.JWKS, Issuer: c.JWTIssuer, Audience: c.JWTAudience,
			OwnerClaim: c.JWTOwnerClaim, ScopeClaim: c.JWTScopeClaim, Refresh: c.JWTRefresh, Leeway: c.JWTLeeway,
		}, log)
		if err != nil {
			return nil, err
		}
		log.Info("auth jwt", zap.String("jwks", c.JWKS), zap.String("issuer", c.JWTIssuer), zap.String("audience", c.JWTAudience))
	}
	if policy == nil && jwtv == nil {
		if !loopback {
			return nil, fmt.Errorf("no authentication configured for %s: set --auth-policy or --jwt-jwks (a development token is made only for loopback addresses)", c.Listen)
		}
		var err error
		if policy, err = devPolicy(c.DataDir, log); err != nil {
			return nil, err
		}
	}
	var err error
	if p.auth, err = auth.NewAuthenticator(policy, jwtv); err != nil {
		return nil, err
	}

	if c.PageTokenKeyFile != "" {
		if p.pageTokenKey, err = readPageTokenKey(c.PageTokenKeyFile); err != nil {
			return nil, err
		}
	}
	ok = true
	return p, nil
}

// watchPolicy loads --auth-policy and reloads it every
// --auth-policy-refresh and on SIGHUP, until stop.
func (c *serveCmd) watchPolicy(ctx context.Context, log *zap.Logger) (policy *auth.PolicySource, stop func(), err error) {
	if policy, err = auth.LoadPolicy(c.AuthPolicy, log); err != nil {
		return nil, nil, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reload := make(chan struct{}, 1)
	watchCtx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-hup:
				select {
				case reload <- struct{}{}:
				default:
				}
			}
		}
	}()
	go policy.Watch(watchCtx, c.AuthPolicyRefresh, reload)
	log.Info("auth policy", zap.String("path", c.AuthPolicy))
	return policy, func() { signal.Stop(hup); cancel() }, nil
}

// readPageTokenKey reads the key page tokens are sealed with: at least
// 32 bytes.
func readPageTokenKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("page token key: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("page token key: %s holds %d bytes; at least 32 are needed", path, len(key))
	}
	return key, nil
}

// devPolicy is the policy of a server started with nothing configured on
// loopback: one operator principal ("dev", every scope, owners.erase
// included, which admin does not imply, and every owner)
// proven by a random token kept in <data-dir>/dev-token (mode 0600) and
// reused on the next start. Only the file's path is logged.
func devPolicy(dataDir string, log *zap.Logger) (*auth.PolicySource, error) {
	path := filepath.Join(dataDir, devTokenFile)
	token, err := transport.ReadToken(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		token = hex.EncodeToString(b)
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("development token: %w", err)
		}
		if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("development token: %w", err)
		}
	}
	pol, err := auth.ParsePolicy([]byte(fmt.Sprintf("principals:\n  - name: dev\n    tokens_sha256: [%s]\n    scopes: [admin, owners.erase]\n    owners: [\"*\"]\n", auth.TokenDigest(token))))
	if err != nil {
		return nil, err
	}
	log.Warn("no --auth-policy or --jwt-jwks: serving loopback only, with a development operator token", zap.String("token_file", path))
	return auth.StaticPolicy(pol), nil
}
