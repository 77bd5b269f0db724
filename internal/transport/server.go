// Package transport secures connections: the server's TLS (certificates
// reloaded from disk as they rotate, optional client verification) and the
// client side that archivectl and the tests dial with (a CA, a client
// certificate, a bearer token).
package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/grpc/credentials/tls/certprovider/pemfile"
)

// ClientAuth says what the server asks of a client certificate when a
// client CA is configured.
type ClientAuth string

const (
	// VerifyIfGiven verifies a certificate the client sends and lets
	// callers without one prove themselves with a bearer token.
	VerifyIfGiven ClientAuth = "verify-if-given"
	// Require refuses the handshake without a certificate the CA signed.
	Require ClientAuth = "require"
)

// ServerFiles name the PEM files of the server's TLS.
type ServerFiles struct {
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, verifies client certificates (mutual TLS).
	ClientCAFile string
	ClientAuth   ClientAuth
	// Refresh is how often the files are re-read; a rotated certificate
	// is served to the next handshake after it.
	Refresh time.Duration
}

// ServerCredentials returns gRPC transport credentials that read the
// files through grpc-go's pemfile provider, which re-reads them every
// Refresh, and a stop function that ends the re-reading. It fails at once
// when the files cannot be loaded, rather than on the first handshake.
func ServerCredentials(ctx context.Context, f ServerFiles) (credentials.TransportCredentials, func(), error) {
	creds, _, stop, err := ServerTLS(ctx, f)
	return creds, stop, err
}

// ServerTLS is ServerCredentials with, beside the gRPC credentials, the
// same TLS for an HTTP server (the HTTP/JSON listener): the same files,
// rotation and client verification, offering HTTP/2 and HTTP/1.1.
func ServerTLS(ctx context.Context, f ServerFiles) (credentials.TransportCredentials, *tls.Config, func(), error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, nil, nil, errors.New("tls: both a certificate and a key file are required")
	}
	if _, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile); err != nil {
		return nil, nil, nil, fmt.Errorf("tls: load %s and %s: %w", f.CertFile, f.KeyFile, err)
	}
	if f.Refresh <= 0 {
		f.Refresh = 10 * time.Second
	}
	prov, err := pemfile.NewProvider(pemfile.Options{
		CertFile: f.CertFile, KeyFile: f.KeyFile, RootFile: f.ClientCAFile, RefreshDuration: f.Refresh,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls: %w", err)
	}
	clientAuth := tls.NoClientCert
	if f.ClientCAFile != "" {
		clientAuth = tls.VerifyClientCertIfGiven
		if f.ClientAuth == Require {
			clientAuth = tls.RequireAndVerifyClientCert
		}
	}
	loadCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := prov.KeyMaterial(loadCtx); err != nil {
		prov.Close()
		return nil, nil, nil, fmt.Errorf("tls: load key material: %w", err)
	}
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			return configFor(hello.Context(), prov, clientAuth, "h2")
		},
	}
	httpTLS := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			return configFor(hello.Context(), prov, clientAuth, "h2", "http/1.1")
		},
	}
	return credentials.NewTLS(base), httpTLS, prov.Close, nil
}

// configFor builds each handshake's config from the key material in force,
// so certificates and client CAs rotate without a restart.
func configFor(ctx context.Context, prov certprovider.Provider, clientAuth tls.ClientAuthType, protos ...string) (*tls.Config, error) {
	km, err := prov.KeyMaterial(ctx)
	if err != nil {
		return nil, fmt.Errorf("tls: key material: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: km.Certs,
		ClientCAs:    km.Roots,
		ClientAuth:   clientAuth,
		// gRPC requires ALPN h2; the base config's is not inherited.
		NextProtos: protos,
	}, nil
}
