package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// errNoPreface: a plaintext connection the server closed before sending a
// byte. A gRPC server speaking plaintext sends its HTTP/2 settings at
// once; a TLS server closes on the plaintext preface without a word.
var errNoPreface = errors.New("the server closed the connection before its first byte of plaintext gRPC")

// prefaceWatch fails the call in flight at once when a plaintext
// connection closes before the server said anything, instead of letting
// gRPC retry the call for seconds before it gives the same answer.
type prefaceWatch struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc // of the call in flight, or nil
}

func (w *prefaceWatch) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(w.dial),
		grpc.WithChainUnaryInterceptor(w.unary),
		grpc.WithChainStreamInterceptor(w.stream),
	}
}

func (w *prefaceWatch) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, w: w}, nil
}

// watching makes ctx's call the one a silent close fails; done ends it.
func (w *prefaceWatch) watching(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
		cancel(nil)
	}
}

func (w *prefaceWatch) silentClose() { w.fail(errNoPreface) }

// fail ends the call in flight with cause: a failure no retry heals.
func (w *prefaceWatch) fail(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel(cause)
	}
}

// why is the call's error as the caller should see it: the silent close,
// or the certificate refused, when that is what ended it.
func why(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cause := context.Cause(ctx)
	var refused *certificateRefused
	switch {
	case errors.Is(cause, errNoPreface):
		return status.Error(codes.Unavailable, errNoPreface.Error())
	case errors.As(cause, &refused):
		return status.Error(codes.Unavailable, refused.Error())
	}
	return err
}

// certificateRefused: the server's certificate did not verify (an
// unknown CA, another name). Every attempt would fail the same way, so
// the first ends the call, where gRPC retried it for seconds.
type certificateRefused struct{ err error }

func (e *certificateRefused) Error() string {
	return "TLS handshake: the server's certificate was refused: " + e.err.Error()
}

// watchedTLS tells its watch when the server's certificate is refused.
type watchedTLS struct {
	credentials.TransportCredentials
	w *prefaceWatch
}

func (c watchedTLS) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		c.w.fail(&certificateRefused{err: verify})
	}
	return out, info, err
}

func (c watchedTLS) Clone() credentials.TransportCredentials {
	return watchedTLS{TransportCredentials: c.TransportCredentials.Clone(), w: c.w}
}

// tlsOptions are those of a TLS client whose certificate failures end the
// call at once.
func (w *prefaceWatch) tlsOptions(cfg *tls.Config) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(watchedTLS{TransportCredentials: credentials.NewTLS(cfg), w: w}),
		grpc.WithChainUnaryInterceptor(w.unary),
		grpc.WithChainStreamInterceptor(w.stream),
	}
}

func (w *prefaceWatch) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, done := w.watching(ctx)
	defer done()
	return why(ctx, invoker(ctx, method, req, reply, cc, opts...))
}

func (w *prefaceWatch) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, done := w.watching(ctx)
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		done()
		return nil, why(ctx, err)
	}
	return &watchedStream{ClientStream: s, ctx: ctx, done: done}, nil
}

// watchedStream ends its watch when the stream ends.
type watchedStream struct {
	grpc.ClientStream
	ctx  context.Context
	done func()
	once sync.Once
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		err = why(s.ctx, err)
		s.once.Do(s.done)
	}
	return err
}

func (s *watchedStream) SendMsg(m any) error { return why(s.ctx, s.ClientStream.SendMsg(m)) }

// watchedConn tells its watch when it ends before the server's first byte.
type watchedConn struct {
	net.Conn
	w     *prefaceWatch
	heard atomic.Bool
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.heard.Store(true)
	}
	if err != nil && !c.heard.Load() {
		c.w.silentClose()
	}
	return n, err
}
