package server

import (
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"

	"github.com/contentbackup/contentbackup/internal/server/authz"
)

// The interceptor chain, outermost first. Before it, at the transport:
// the tap proves the caller on the stream's headers (authz.Tap) before a
// byte of its request is read, and the request codec and the memory
// budget's decompressor read the request (server.go). The order below is
// part of correctness; TestInterceptorChainOrder holds it:
//
//  1. authz: the principal's scope and owners are checked against the
//     decoded request before anything else sees it, so no later stage
//     (a log line, a metric label) runs for a call that is refused, and
//     a handler never runs for one.
//  2. logging: one line per call with its code and the principal authz
//     put in the context, so refusals by the handler and panics are
//     logged with their final code.
//  3. metrics: counts and times the handler's own work, with the code
//     recovery turned a panic into.
//  4. reasons: a status the handler (or recovery) returned without a
//     google.rpc.ErrorInfo gets its code's reason (status.go), so every
//     error a caller reads names its reason, and logging and metrics see
//     the status the caller gets.
//  5. recovery: innermost, so a panicking handler becomes INTERNAL
//     before logging and metrics see the call end, and the server lives.
type stage struct {
	name   string
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

// chain lists the stages; metrics may be nil (no registry: no stage), and
// ended (told of every call's error by method and reason).
func chain(authorizer *authz.Authorizer, log logging.Logger, logOpts []logging.Option, metrics *grpcprom.ServerMetrics, ended func(method, reason string), panicHandler recovery.Option) []stage {
	stages := []stage{
		{"authz", authorizer.Unary, authorizer.Stream},
		{"logging", logging.UnaryServerInterceptor(log, logOpts...), logging.StreamServerInterceptor(log, logOpts...)},
	}
	if metrics != nil {
		stages = append(stages, stage{"metrics", metrics.UnaryServerInterceptor(), metrics.StreamServerInterceptor()})
	}
	reasonsUnary, reasonsStream := reasons(ended)
	stages = append(stages, stage{"reasons", reasonsUnary, reasonsStream})
	return append(stages, stage{"recovery", recovery.UnaryServerInterceptor(panicHandler), recovery.StreamServerInterceptor(panicHandler)})
}

// interceptors is the chain as grpc.ChainUnaryInterceptor and
// grpc.ChainStreamInterceptor take it.
func interceptors(stages []stage) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	unary := make([]grpc.UnaryServerInterceptor, 0, len(stages))
	stream := make([]grpc.StreamServerInterceptor, 0, len(stages))
	for _, s := range stages {
		unary, stream = append(unary, s.unary), append(stream, s.stream)
	}
	return unary, stream
}
