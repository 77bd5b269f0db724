package interop

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/transport"
)

const interopToken = "interop-test-token"

// serve runs the server with cfg on a loopback TCP port, behind a policy
// of one operator, and returns a connection proven as that operator.
func serve(t *testing.T, cfg server.Config) *grpc.ClientConn {
	t.Helper()
	pol, err := auth.ParsePolicy([]byte("principals:\n  - name: interop\n    tokens_sha256: [" + auth.TokenDigest(interopToken) + "]\n    scopes: [admin]\n    owners: [\"*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Auth, err = auth.NewAuthenticator(auth.StaticPolicy(pol), nil); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(cfg, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	opts, err := transport.DialOptions(transport.ClientOptions{Insecure: true, Token: interopToken})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); <-done })
	return conn
}
