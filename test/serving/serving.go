// Package serving runs the whole API over TCP on a store, for the tests
// of test/ that put the server through a real failure (make ha, make
// citus): one operator principal proven by a token, the server's health
// checked every 250 ms, and a client connection for that principal.
package serving

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// Serve serves st on a loopback port until the test ends and returns a
// client connection proven by token, an operator's (every scope, every
// owner). log, when nil, discards.
func Serve(t testing.TB, st store.Store, token string, log *zap.Logger) *grpc.ClientConn {
	t.Helper()
	if log == nil {
		log = zap.NewNop()
	}
	pol, err := auth.ParsePolicy([]byte("principals:\n  - name: operator\n    tokens_sha256: [" + auth.TokenDigest(token) + "]\n    scopes: [admin]\n    owners: [\"*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.NewAuthenticator(auth.StaticPolicy(pol), nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Store: st, Auth: authn, StoreCheckInterval: 250 * time.Millisecond}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Second) }()
	opts, err := transport.DialOptions(transport.ClientOptions{Insecure: true, Token: token})
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
