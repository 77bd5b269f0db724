package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/contentbackup/contentbackup/internal/server/httpjson"
	"github.com/contentbackup/contentbackup/internal/transport"
)

// plaintextOffLoopback is the one rule every listener follows: plaintext
// only on loopback, unless --insecure says a mesh or proxy encrypts in
// front of it. flag names the listener's flag in the error.
func plaintextOffLoopback(flag, addr string, tls, insecure bool) error {
	if addr == "" || tls || insecure || transport.IsLoopback(addr) {
		return nil
	}
	return fmt.Errorf("%s %s: refusing to serve plaintext off loopback: set --tls-cert and --tls-key, or --insecure behind a mesh or proxy that encrypts", flag, addr)
}

// httpListener is one of the binary's HTTP listeners: the HTTP/JSON
// listener, the history server, metrics and probes.
type httpListener struct {
	name    string
	lis     net.Listener
	handler http.Handler
	// tls, when set, serves TLS with it (HTTP/2 over TLS too); h2c serves
	// HTTP/2 in plaintext (Connect's streams need HTTP/2 end to end).
	tls *tls.Config
	h2c bool
	// bounded applies the public listeners' bounds: idle keep-alive
	// connections closed, as gRPC's connection age closes one, and the
	// request line and headers at httpjson.MaxHeaderBytes (a long JWT
	// fits; net/http's 1 MiB default is all query string an error may
	// quote).
	bounded bool
}

// serveHTTP serves l in g until ctx ends, then shuts it down, giving its
// calls 5 s to end.
func serveHTTP(ctx context.Context, g *errgroup.Group, l httpListener, log *zap.Logger) {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	hs := &http.Server{Handler: l.handler, ReadHeaderTimeout: 10 * time.Second, Protocols: protocols}
	if l.tls != nil {
		// A copy each: net/http writes its HTTP/2 settings into the
		// server's config (NextProtos) while another server sharing it
		// copies it, a data race between the history and HTTP/JSON
		// listeners (found when the tests ran the assembly in process
		// under -race).
		hs.TLSConfig = l.tls.Clone()
	}
	if l.bounded {
		hs.IdleTimeout, hs.MaxHeaderBytes = 2*time.Minute, httpjson.MaxHeaderBytes
	}
	serve := func() error { return hs.Serve(l.lis) }
	switch {
	case l.tls != nil:
		protocols.SetHTTP2(true)
		serve = func() error { return hs.ServeTLS(l.lis, "", "") } // the certificates come from l.tls
	case l.h2c:
		protocols.SetUnencryptedHTTP2(true)
	}
	g.Go(func() error {
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	})
	log.Info("serving "+l.name, zap.String("addr", l.lis.Addr().String()), zap.Bool("tls", l.tls != nil))
}
