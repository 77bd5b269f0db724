package main

import (
	"errors"
	"os"

	"google.golang.org/grpc"

	"github.com/contentbackup/contentbackup/internal/transport"
)

// connFlags say how archivectl reaches and proves itself to the server.
type connFlags struct {
	TLSCA         string `name:"tls-ca" env:"CONTENTBACKUP_TLS_CA" help:"PEM CA that signed the server's certificate (default: the system roots)."`
	TLSCert       string `name:"tls-cert" env:"CONTENTBACKUP_TLS_CERT" help:"PEM client certificate, for a server that verifies clients (mutual TLS)."`
	TLSKey        string `name:"tls-key" env:"CONTENTBACKUP_TLS_KEY" help:"PEM key of --tls-cert."`
	TLSServerName string `name:"tls-server-name" env:"CONTENTBACKUP_TLS_SERVER_NAME" help:"Name to verify in the server's certificate, when it differs from the address."`
	Plaintext     bool   `env:"CONTENTBACKUP_PLAINTEXT" help:"Dial without TLS. Implied for a loopback address when no --tls-* flag is given."`
	TokenFile     string `name:"token-file" env:"CONTENTBACKUP_TOKEN_FILE" help:"File holding the bearer token. Or set CONTENTBACKUP_TOKEN to the token."`
}

// dialOptions: TLS unless the server is on loopback (or --plaintext), with
// the token from --token-file or CONTENTBACKUP_TOKEN.
func (f connFlags) dialOptions(server string) ([]grpc.DialOption, error) {
	tlsGiven := f.TLSCA != "" || f.TLSCert != "" || f.TLSKey != "" || f.TLSServerName != ""
	if f.Plaintext && tlsGiven {
		return nil, errors.New("--plaintext with a --tls-* flag: choose one")
	}
	o := transport.ClientOptions{
		CAFile: f.TLSCA, CertFile: f.TLSCert, KeyFile: f.TLSKey, ServerName: f.TLSServerName,
		Insecure: f.Plaintext || (!tlsGiven && transport.IsLoopback(server)),
	}
	switch {
	case f.TokenFile != "":
		t, err := transport.ReadToken(f.TokenFile)
		if err != nil {
			return nil, err
		}
		o.Token = t
	default:
		o.Token = os.Getenv("CONTENTBACKUP_TOKEN")
	}
	opts, err := transport.DialOptions(o)
	if err != nil {
		return nil, err
	}
	if !o.Insecure {
		cfg, err := transport.ClientTLS(o)
		if err != nil {
			return nil, err
		}
		// The same TLS, watched: a refused certificate ends the call.
		return append(opts, (&prefaceWatch{}).tlsOptions(cfg)...), nil
	}
	return append(opts, (&prefaceWatch{}).options()...), nil
}
