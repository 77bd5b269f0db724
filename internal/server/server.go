// Package server assembles the gRPC server: the contentbackup.v1 services,
// the standard health and reflection services, and the metrics, logging and
// recovery interceptors. Handlers live one file per service.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/archive"
	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/backup"
	"github.com/contentbackup/contentbackup/internal/budget"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/preview"
	"github.com/contentbackup/contentbackup/internal/server/authz"
	"github.com/contentbackup/contentbackup/internal/server/callbudget"
	"github.com/contentbackup/contentbackup/internal/server/pagetoken"
	"github.com/contentbackup/contentbackup/internal/server/requestid"
	"github.com/contentbackup/contentbackup/internal/server/wirecodec"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/telemetry"
)

// DefaultMaxRecvBytes bounds one request message. It leaves room for a
// batch of envelopes or an attachment well past the 4 MiB gRPC default.
const DefaultMaxRecvBytes = 32 << 20

// Config is what the server needs from its flags.
type Config struct {
	MaxRecvBytes    int
	MaxDecodeBatch  int
	MaxNestingDepth int
	// MaxBatchExpanded bounds the decompressed content of one DecodeBatch.
	MaxBatchExpanded int64
	// Metrics receives the gRPC server metrics (calls, codes, handling
	// time) when set.
	Metrics prometheus.Registerer
	// Store holds conversations; ConversationService is served when set.
	Store store.Store
	// MaxAppendBatch bounds the messages of one AppendMessages call.
	MaxAppendBatch int

	// Auth proves callers. Nil refuses every call but health: the server
	// never runs open.
	Auth *auth.Authenticator
	// PublicReflection serves reflection without credentials; otherwise
	// any proven principal may use it.
	PublicReflection bool
	// Credentials secure the transport (TLS or mutual TLS); nil serves
	// plaintext, which cmd/server allows only on loopback or with --insecure.
	Credentials credentials.TransportCredentials
	// PageTokenKey signs page tokens (HMAC-SHA256). Replicas behind one
	// address need the same key; nil draws a random key, so tokens die
	// with the process.
	PageTokenKey []byte
	// Limits bounds memory, streams and record sizes; zero fields take
	// DefaultLimits. MaxBatchExpanded, when set, is its CallExpandBytes.
	Limits Limits
	// StoreCheckInterval is how often health pings the store (default 2 s;
	// each ping may take half of it).
	StoreCheckInterval time.Duration
	// Jobs, when set with Store, serves BackupService and
	// google.longrunning.Operations over it: exports and imports run on
	// the server against object storage. cmd/server builds it, with Pool
	// (which it must share) and JobImport's reader limits; the server
	// runs it while it serves and closes it on shutdown.
	Jobs *jobs.Manager
	// PreviewWords are the notification previews' words (preview.Load
	// of --preview-words); nil: the built-in table.
	PreviewWords *preview.Words
	// Pool is the server-wide memory budget every call is charged to
	// (and the jobs' transfers, when they share it); nil: New makes one of
	// ResolvedLimits().MemoryBytes.
	Pool *budget.Pool
	// Tracing, when set, puts a span on every call (otelgrpc) under its
	// provider, continuing a caller's trace; nil traces nothing.
	Tracing *telemetry.Tracing
}

// ResolvedLimits is what the server runs under: Limits with
// MaxBatchExpanded as its CallExpandBytes when that is unset, and every
// unset field at its default.
func (c Config) ResolvedLimits() Limits {
	l := c.Limits
	if c.MaxBatchExpanded > 0 && l.CallExpandBytes <= 0 {
		l.CallExpandBytes = c.MaxBatchExpanded
	}
	return l.withDefaults()
}

// AttachJobs builds the jobs manager cfg serves, from jc: sharing cfg's
// memory budget (made here when cfg has none), reading archives under
// cfg's limits, over cfg's store. cmd/server calls it with the manager's
// hooks already set; the server runs the manager once it serves.
func AttachJobs(cfg *Config, jc jobs.Config) *jobs.Manager {
	limits := cfg.ResolvedLimits()
	if cfg.Pool == nil {
		cfg.Pool = budget.NewPool(limits.MemoryBytes)
	}
	jc.Store, jc.Pool, jc.Import = cfg.Store, cfg.Pool, JobImport(limits)
	cfg.Jobs = jobs.New(jc)
	return cfg.Jobs
}

// JobImport is how import jobs read archives under limits: the records,
// record size, zstd window and read-ahead the Import stream allows.
func JobImport(l Limits) backup.ImportOptions {
	return backup.ImportOptions{
		Limits: l.Records, ReadAheadBytes: l.ImportReadAheadBytes,
		Reader: archive.ReaderOptions{MaxRecordSize: l.maxArchiveRecord(), MaxWindow: uint64(l.ArchiveWindowBytes)},
	}
}

// Server is a configured gRPC server with its health state.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
	log    *zap.Logger

	store         store.Store
	jobs          *jobs.Manager
	storeInterval time.Duration
	storeUp       prometheus.Gauge
	shutdown      chan struct{}
	// authz proves callers for the HTTP/JSON listener's door too.
	authz   *authz.Authorizer
	metrics prometheus.Registerer
	// pool is the memory budget the HTTP/JSON listener's inflation is
	// charged to, as the gRPC listener's is.
	pool *budget.Pool
}

// New builds the server and registers every service: the call chain
// (interceptors and transport options), the services over the store and
// the jobs manager, and health.
func New(cfg Config, log *zap.Logger) *Server {
	if cfg.MaxRecvBytes <= 0 {
		cfg.MaxRecvBytes = DefaultMaxRecvBytes
	}
	limits := cfg.ResolvedLimits()
	pool := cfg.Pool
	if pool == nil {
		pool = budget.NewPool(limits.MemoryBytes)
	}
	opts, callMetrics, authz := serverOptions(cfg, limits, pool, log)
	g := grpc.NewServer(opts...)
	jm := registerServices(g, cfg, limits, pool, log)

	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	for name := range g.GetServiceInfo() {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	reflection.Register(g)
	if callMetrics != nil {
		callMetrics.InitializeMetrics(g)
	}
	srv := &Server{grpc: g, health: hs, log: log, store: cfg.Store, jobs: jm, storeInterval: cfg.StoreCheckInterval, shutdown: make(chan struct{}),
		authz: authz, metrics: cfg.Metrics, pool: pool}
	if srv.storeInterval <= 0 {
		srv.storeInterval = 2 * time.Second
	}
	if cfg.Store != nil {
		srv.storeUp = telemetry.NewStoreUp(cfg.Metrics)
	}
	return srv
}

// serverOptions is the call chain every RPC passes through, outermost
// first (the caller proven before anything else runs, so every log line
// below names the principal), and the transport's limits; with metrics,
// the per-call metrics it registered.
func serverOptions(cfg Config, limits Limits, pool *budget.Pool, log *zap.Logger) ([]grpc.ServerOption, *grpcprom.ServerMetrics, *authz.Authorizer) {
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(callLevel),
		logging.WithFieldsFromContext(principalField),
	}
	panicHandler := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.Error("panic in handler", zap.Any("panic", p), zap.Stack("stack"))
		return status.Error(codes.Internal, "internal error")
	})
	inflate := wirecodec.NewGunzip(pool, int64(cfg.MaxRecvBytes))
	reqCodec := wirecodec.NewCodec(inflate)
	authzCfg := authz.Config{Authn: cfg.Auth, PublicReflection: cfg.PublicReflection, Log: log, Malformed: reqCodec.Malformed}
	if am := telemetry.NewAuthMetrics(cfg.Metrics); am != nil {
		authzCfg.Denied, authzCfg.Proved = am.Refused, am.Proved
	}
	authorizer := authz.New(authzCfg)
	var metrics *grpcprom.ServerMetrics
	if cfg.Metrics != nil {
		metrics = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
		cfg.Metrics.MustRegister(metrics)
	}
	var ended func(method, reason string)
	if em := telemetry.NewErrorMetrics(cfg.Metrics); em != nil {
		ended = em.Ended
	}
	unary, stream := interceptors(chain(authorizer, interceptorLogger(log), logOpts, metrics, ended, panicHandler))
	opts := []grpc.ServerOption{
		// Identity first: the caller is proven on the stream's headers,
		// before its request is read, decompressed or decoded.
		grpc.InTapHandle(authorizer.Tap),
		grpc.ForceServerCodecV2(reqCodec),
		// A compressed request is inflated under the memory budget, before
		// any interceptor (see wirecodec.Gunzip).
		//lint:ignore SA1019 the one way to give a server, not the process, a decompressor of its own
		grpc.RPCDecompressor(inflate),
		// gRPC buffers a whole request (up to MaxRecvBytes) before any
		// handler runs; bounding the calls one connection may have open
		// bounds what one client can make it buffer.
		grpc.MaxConcurrentStreams(64),
		grpc.StatsHandler(callbudget.Stats{}),
		// Clients may ping idle connections, but not more than every 10 s.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Connections end after MaxConnectionAge (calls in flight get the
		// grace), so clients behind a load balancer spread over replicas.
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: time.Minute, Timeout: 20 * time.Second,
			MaxConnectionAge: limits.MaxConnectionAge, MaxConnectionAgeGrace: limits.MaxConnectionAgeGrace,
		}),
		grpc.MaxRecvMsgSize(cfg.MaxRecvBytes),
		// Archives stream hundreds of megabytes one way: windows of a few
		// MiB keep the sender from waiting on window updates (grpc-go's
		// dynamic window starts at 64 KiB and grows only as pings measure).
		grpc.InitialWindowSize(4 << 20),
		grpc.InitialConnWindowSize(8 << 20),
		// An export's chunks leave through the connection's write buffer:
		// 256 KiB makes one write system call of what 32 KiB made eight
		// of. grpc-go shares write buffers by default (a connection holds
		// one only while it writes), so idle connections cost nothing.
		grpc.WriteBufferSize(256 << 10),
		grpc.MaxSendMsgSize(cfg.MaxRecvBytes * 2),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
	if cfg.Credentials != nil {
		opts = append(opts, grpc.Creds(cfg.Credentials))
	}
	if cfg.Tracing != nil {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(cfg.Tracing.Provider), otelgrpc.WithPropagators(cfg.Tracing.Propagator))))
	}
	return opts, metrics, authorizer
}

// registerServices registers the services the configuration makes
// possible: content always; conversations and archives over a store; and
// over a store with jobs configured, backups and operations, with the
// jobs manager it returns.
func registerServices(g *grpc.Server, cfg Config, limits Limits, pool *budget.Pool, log *zap.Logger) *jobs.Manager {
	var opts []codec.Option
	if cfg.MaxNestingDepth > 0 {
		opts = append(opts, codec.WithMaxNestingDepth(cfg.MaxNestingDepth))
	}
	reg := codec.NewRegistry(opts...)
	dm := telemetry.NewServiceMetrics(cfg.Metrics)
	content := NewContentService(reg, cfg.MaxDecodeBatch, limits.CallExpandBytes, pool)
	content.words = cfg.PreviewWords
	if content.words == nil {
		var err error
		if content.words, err = preview.Defaults(); err != nil {
			log.Error("preview words do not load: Preview is unavailable", zap.Error(err))
		}
	}
	content.metrics = dm
	cb.RegisterContentServiceServer(g, content)
	if cfg.Store == nil {
		return nil
	}
	conv := NewConversationService(cfg.Store, reg, ConversationOptions{
		MaxAppend: cfg.MaxAppendBatch, Tokens: pagetoken.New(cfg.PageTokenKey), Limits: limits, Pool: pool,
	})
	conv.metrics = dm
	cb.RegisterConversationServiceServer(g, conv)
	arch := NewArchiveService(cfg.Store, limits, pool)
	arch.metrics = dm
	cb.RegisterArchiveServiceServer(g, arch)
	jm := cfg.Jobs
	if jm == nil {
		return nil
	}
	cb.RegisterBackupServiceServer(g, &BackupService{jobs: jm, tokens: pagetoken.New(cfg.PageTokenKey)})
	longrunningpb.RegisterOperationsServer(g, &OperationsService{jobs: jm, store: cfg.Store, tokens: pagetoken.New(cfg.PageTokenKey)})
	return jm
}

// storeServices are the services that need the store: health reports
// them, and the server as a whole, NOT_SERVING while it does not answer.
var storeServices = []string{"", cb.ConversationService_ServiceDesc.ServiceName, cb.ArchiveService_ServiceDesc.ServiceName,
	cb.BackupService_ServiceDesc.ServiceName, longrunningpb.Operations_ServiceDesc.ServiceName}

// watchStore pings the store every interval until ctx is done or the
// server shuts down, and keeps health in step: NOT_SERVING while pings
// fail, SERVING again when they succeed, with no restart. Readiness
// follows health; liveness does not, so an outage never restarts pods.
func (s *Server) watchStore(ctx context.Context) {
	if s.store == nil {
		return
	}
	t := time.NewTicker(s.storeInterval)
	defer t.Stop()
	up := true
	for {
		pingCtx, cancel := context.WithTimeout(ctx, s.storeInterval/2)
		err := s.store.Ping(pingCtx)
		if err == nil {
			// Answering reads is not enough: a full disk or a read-only
			// standby refuses every write the services would make.
			err = s.store.ProbeWrite(pingCtx)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-s.shutdown:
			return
		default:
		}
		switch {
		case err != nil && up:
			s.log.Error("store unreachable or refusing writes; health reports NOT_SERVING until a write succeeds", zap.Error(err))
		case err == nil && !up:
			s.log.Info("store answers again; health reports SERVING")
		}
		if (err == nil) != up {
			up = err == nil
			st := healthpb.HealthCheckResponse_SERVING
			if !up {
				st = healthpb.HealthCheckResponse_NOT_SERVING
			}
			for _, name := range storeServices {
				s.health.SetServingStatus(name, st)
			}
		}
		if s.storeUp != nil {
			if up {
				s.storeUp.Set(1)
			} else {
				s.storeUp.Set(0)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.shutdown:
			return
		case <-t.C:
		}
	}
}

// GRPC exposes the underlying server, for tests that serve it themselves.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Jobs is the job manager, nil unless Config.Jobs was set.
func (s *Server) Jobs() *jobs.Manager { return s.jobs }

// Serve serves on lis until ctx is done, then reports NOT_SERVING, lets
// in-flight calls finish for up to grace, and stops.
func (s *Server) Serve(ctx context.Context, lis net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(lis) }()
	go s.watchStore(ctx)
	if s.jobs != nil {
		go s.jobs.Runner.Run(ctx)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down", zap.Duration("grace", grace))
	close(s.shutdown)
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		s.log.Warn("grace period over; closing remaining calls")
		s.grpc.Stop()
	}
	if s.jobs != nil {
		// Jobs still running end failed (UNAVAILABLE, nothing committed)
		// rather than hold the process past its grace.
		jctx, cancel := context.WithTimeout(context.Background(), grace)
		s.jobs.Runner.Close(jctx)
		cancel()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// principalField puts the request id and the proven principal in every
// request log line; never a credential.
func principalField(ctx context.Context) logging.Fields {
	f := logging.Fields{"request_id", requestid.FromContext(ctx)}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		f = append(f, "trace_id", sc.TraceID().String())
	}
	if p := auth.FromContext(ctx); p != nil {
		f = append(f, "principal", p.Name, "auth.method", p.Method)
	}
	return f
}

// callLevel logs successful calls at debug level, so the hot path costs
// nothing at the default info level, and failures where operators look.
func callLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK, codes.Canceled:
		return logging.LevelDebug
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
		codes.OutOfRange, codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted:
		return logging.LevelInfo
	case codes.DeadlineExceeded:
		return logging.LevelWarn
	default:
		return logging.LevelError
	}
}

// interceptorLogger adapts zap to the middleware's logger, the adapter the
// go-grpc-middleware project documents for zap.
func interceptorLogger(l *zap.Logger) logging.Logger {
	// The caller would be the middleware, which tells an operator nothing.
	l = l.WithOptions(zap.WithCaller(false))
	return logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, fields ...any) {
		zl := zapLevel(lvl)
		if !l.Core().Enabled(zl) {
			return
		}
		zf := make([]zap.Field, 0, len(fields)/2)
		for i := 0; i+1 < len(fields); i += 2 {
			key, _ := fields[i].(string)
			zf = append(zf, zap.Any(key, fields[i+1]))
		}
		if ce := l.Check(zl, msg); ce != nil {
			ce.Write(zf...)
		}
	})
}

func zapLevel(lvl logging.Level) zapcore.Level {
	switch lvl {
	case logging.LevelDebug:
		return zapcore.DebugLevel
	case logging.LevelInfo:
		return zapcore.InfoLevel
	case logging.LevelWarn:
		return zapcore.WarnLevel
	default:
		return zapcore.ErrorLevel
	}
}

// Serving reports whether the health service says the server serves.
func (s *Server) Serving(ctx context.Context) bool {
	resp, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}
