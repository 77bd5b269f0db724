package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ClientOptions say how a client reaches the server.
type ClientOptions struct {
	// CAFile verifies the server's certificate; empty with Insecure unset
	// uses the system roots.
	CAFile string
	// CertFile and KeyFile present a client certificate (mutual TLS).
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
	// Insecure dials plaintext: only for a server on loopback.
	Insecure bool
	// Token is sent as "authorization: Bearer <token>" on every call.
	Token string
}

// DialOptions returns the gRPC dial options for o.
func DialOptions(o ClientOptions) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if o.Insecure {
		if o.CAFile != "" || o.CertFile != "" {
			return nil, errors.New("tls: a CA or client certificate was given with plaintext (--insecure)")
		}
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		cfg, err := ClientTLS(o)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	if o.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: o.Token, requireTLS: !o.Insecure}))
	}
	return opts, nil
}

// RetryServiceConfig is the gRPC service config a client of this server
// retries with: a call that fails UNAVAILABLE (the store failing over, a
// replica draining) is sent again as it was, up to five attempts with
// exponential backoff from 0.2 s to 5 s. Only the methods that are
// idempotent under a retry of the same request are named (docs/ha.md,
// "Retrying is safe"): every ConversationService, ContentService and
// ArchiveService method, and BackupService's reads and deletion; never
// StartExport or StartImport, each call of which starts a job. A client
// stream is retried only while what it sent fits gRPC's retry buffer, so
// a large Import is retried by starting it again.
const RetryServiceConfig = `{
  "methodConfig": [{
    "name": [
      {"service": "contentbackup.v1.ConversationService"},
      {"service": "contentbackup.v1.ContentService"},
      {"service": "contentbackup.v1.ArchiveService"},
      {"service": "contentbackup.v1.BackupService", "method": "ListBackups"},
      {"service": "contentbackup.v1.BackupService", "method": "GetBackup"},
      {"service": "contentbackup.v1.BackupService", "method": "GetBackupKey"},
      {"service": "contentbackup.v1.BackupService", "method": "DeleteBackup"},
      {"service": "google.longrunning.Operations"}
    ],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.2s",
      "maxBackoff": "5s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// WithRetries makes a client retry as RetryServiceConfig says.
func WithRetries() grpc.DialOption { return grpc.WithDefaultServiceConfig(RetryServiceConfig) }

// ArchiveDialOptions suit a client that moves archives: stream windows of
// a few MiB, so the sender does not wait on window updates (grpc-go's
// dynamic window starts at 64 KiB and grows only as pings measure), and a
// 256 KiB read buffer, one read system call of what 32 KiB made eight of.
func ArchiveDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(4 << 20), grpc.WithInitialConnWindowSize(8 << 20),
		grpc.WithReadBufferSize(256 << 10),
	}
}

// ClientTLS is the client's TLS config for o.
func ClientTLS(o ClientOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: read CA %s: %w", o.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: %s holds no PEM certificate", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both its certificate and key files")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ReadToken reads a bearer token from a file, trimming the line end that
// editors and echo add.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("token: %s is empty", path)
	}
	return t, nil
}

// bearer sends a token with every call. Over plaintext it is allowed only
// because the caller chose Insecure (a loopback server).
type bearer struct {
	token      string
	requireTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }

// IsLoopback reports whether addr (host:port) names only this machine:
// the one place plaintext is allowed without asking.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
