package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/contentbackup/contentbackup/internal/history"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/preview"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/telemetry"
)

// The serve command's assembly, in the order it runs: preflight reads the
// files the flags name, bind checks every listener's plaintext rule and
// binds it, assemble builds the server (perimeter, store, jobs with their
// KEK checked, metrics, history), and serve runs it, one errgroup owning
// every listener and background loop: the first to fail stops the rest,
// and a signal stops them all.

// Run serves until ctx ends.
func (c *serveCmd) Run(ctx context.Context, con console) error {
	log, err := newLogger(c.LogLevel, c.LogFormat, con.stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	return c.serve(ctx, log)
}

// bind checks each listener's plaintext rule and binds it.
func (c *serveCmd) bind() (*listeners, error) {
	l := &listeners{}
	tls := c.TLSCert != "" || c.TLSKey != ""
	for _, b := range []struct {
		flag, addr, name string
		lis              *net.Listener
	}{
		{"--listen", c.Listen, "", &l.grpc}, {"--http-listen", c.httpAddr(), "http: ", &l.http},
		{"--history-listen", c.HistoryListen, "history: ", &l.history}, {"--metrics-listen", c.MetricsListen, "metrics: ", &l.metrics},
	} {
		if b.addr == "" {
			continue
		}
		// Metrics and probes are plain HTTP (Kubernetes' probes speak no
		// TLS) and carry no credentials. The gRPC listener's rule is the
		// perimeter's, after its TLS flags are checked together.
		if b.lis != &l.metrics && b.lis != &l.grpc {
			if err := plaintextOffLoopback(b.flag, b.addr, tls, c.Insecure); err != nil {
				l.close()
				return nil, err
			}
		}
		lis, err := net.Listen("tcp", b.addr)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("%slisten on %s: %w", b.name, b.addr, err)
		}
		*b.lis = lis
	}
	return l, nil
}

// preflight reads and checks the files the flags name, before anything
// is bound or written.
func (c *serveCmd) preflight() (*jobs.SchedulePolicy, *preview.Words, error) {
	var policy *jobs.SchedulePolicy
	if c.Schedule != "" {
		p, err := jobs.LoadSchedules(c.Schedule)
		if err != nil {
			return nil, nil, err
		}
		policy = p
		// Parsing a policy that names a million owners allocates about
		// 300 MB of YAML nodes for 10 MB of names kept (measured, issue
		// 52); handed back now, once, that garbage does not stay in the
		// process's RSS for its lifetime.
		debug.FreeOSMemory()
	}
	var words *preview.Words
	if c.PreviewWords != "" {
		b, err := os.ReadFile(c.PreviewWords)
		if err != nil {
			return nil, nil, err
		}
		if words, err = preview.Load(b); err != nil {
			return nil, nil, fmt.Errorf("--preview-words %s: %w", c.PreviewWords, err)
		}
	}
	return policy, words, nil
}

// serve assembles the server and serves it until ctx ends: one errgroup
// owns every listener and background loop, and the first to fail stops
// the rest.
func (c *serveCmd) serve(ctx context.Context, log *zap.Logger) error {
	tracing, err := telemetry.New(ctx, telemetry.Config{
		Endpoint: c.OTLPEndpoint, Insecure: c.OTLPInsecure, SampleRatio: c.TraceSampleRatio,
		Service: "contentbackup", Version: version(),
	})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tracing.Shutdown(sctx)
	}()
	if c.OTLPEndpoint != "" {
		log.Info("tracing", zap.String("otlp_endpoint", c.OTLPEndpoint), zap.Float64("sample_ratio", c.TraceSampleRatio))
	}
	policy, words, err := c.preflight()
	if err != nil {
		return err
	}
	lis, err := c.bind()
	if err != nil {
		return err
	}
	defer lis.close()
	a, err := c.assemble(ctx, words, tracing, log)
	if err != nil {
		return err
	}
	defer a.close()

	g, gctx := errgroup.WithContext(ctx)
	gctx, cancel := context.WithCancel(gctx)
	defer cancel()
	// Rotations and the owner-key migration run on every replica: each
	// rewrap is conditional on the row as read.
	g.Go(func() error { a.jobs.Keys.RunKeyWorker(gctx, c.KeyWorkerInterval, a.jobMetrics.KeyStatus); return nil })
	if purge := c.purge(a.store, a.cfg.Metrics, log, a.sweeps...); purge != nil {
		g.Go(func() error { purge.Run(gctx); return nil })
	}
	if a.history != nil {
		serveHTTP(gctx, g, httpListener{name: "the device-sync history server", lis: lis.history, handler: a.history, tls: a.perimeter.httpTLS, bounded: true}, log)
	}
	if a.registry != nil {
		serveHTTP(gctx, g, httpListener{name: "metrics", lis: lis.metrics, handler: metricsMux(a.registry, a.srv, a.perimeter.policy, c.PProf)}, log)
	}
	if lis.http != nil {
		// A listener of its own: sharing the gRPC port would move native
		// gRPC onto net/http's HTTP/2 server, measured slower
		// (BENCHMARKS.md, "HTTP/JSON"). With the gRPC listener's TLS (the
		// same certificates, rotation and client verification).
		h, err := a.srv.HTTPHandler(a.cfg.MaxRecvBytes)
		if err != nil {
			return err
		}
		serveHTTP(gctx, g, httpListener{name: "HTTP/JSON (Connect, gRPC-Web)", lis: lis.http, handler: h, tls: a.perimeter.httpTLS, h2c: true, bounded: true}, log)
	}
	if policy != nil {
		sc, err := jobs.NewScheduler(ctx, a.jobs, policy)
		if err != nil {
			cancel()
			_ = g.Wait()
			return err
		}
		sc.Start()
		g.Go(func() error { <-gctx.Done(); sc.Stop(); return nil })
		log.Info("schedules", zap.Int("count", len(policy.Schedules)))
	}
	log.Info("serving", zap.String("addr", lis.grpc.Addr().String()), zap.String("version", version()),
		zap.Strings("job_buckets", a.jobs.Buckets().Names()))
	g.Go(func() error {
		defer cancel() // the gRPC server stopped: so does the rest
		return a.srv.Serve(gctx, lis.grpc, c.ShutdownGrace)
	})
	return g.Wait()
}

// assemble builds the server: its perimeter (TLS, auth), store, jobs with
// their KEK checked against the catalog, metrics and history server.
func (c *serveCmd) assemble(ctx context.Context, words *preview.Words, tracing *telemetry.Tracing, log *zap.Logger) (_ *assembly, err error) {
	a := &assembly{}
	defer func() {
		if err != nil {
			a.close() // what was built before the failure
		}
	}()
	if a.perimeter, err = c.perimeter(ctx, log); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, a.perimeter.stop)
	if a.store, err = openStore(ctx, c.storeFlags, c.Migrate, c.poolSize(), log, tracing); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { _ = a.store.Close() })
	jobsCfg, closeJobs, err := c.jobs(ctx, c.DataDir)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, closeJobs)
	if !jobsCfg.KEK.KMS() {
		log.Warn("backup data keys are wrapped by a local key file: set --job-key-keeper to a KMS key in production")
	}
	a.cfg = server.Config{
		PreviewWords: words, Auth: a.perimeter.auth, Credentials: a.perimeter.creds, PublicReflection: c.PublicReflection,
		PageTokenKey: a.perimeter.pageTokenKey, MaxRecvBytes: c.MaxRecvBytes, MaxDecodeBatch: c.MaxDecodeBatch,
		MaxNestingDepth: c.MaxNestingDepth, MaxBatchExpanded: c.MaxBatchExpanded, MaxAppendBatch: c.MaxAppendBatch,
		Store: a.store, Limits: c.limits(c.MaxBatchExpanded), Tracing: tracing, StoreCheckInterval: c.StoreCheckInterval,
	}
	if c.MetricsListen != "" {
		a.registry = prometheus.NewRegistry()
		a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		telemetry.RegisterStoreMetrics(a.registry, a.store)
		telemetry.RegisterPolicyMetrics(a.registry, a.perimeter.policy)
		a.cfg.Metrics = a.registry
	}
	// The jobs manager: its metrics here, its budget and limits the
	// server's.
	jobsCfg.Log = log.Named("jobs")
	a.jobMetrics = telemetry.NewJobMetrics(a.cfg.Metrics)
	a.jobMetrics.Instrument(jobsCfg)
	a.jobs = server.AttachJobs(&a.cfg, *jobsCfg)
	a.jobMetrics.Watch(a.jobs)
	// The KEK is checked against the catalog before anything serves: a
	// missing, replaced or unreadable KEK stops the server here, naming
	// the file and the fingerprint the catalog expects.
	if err := a.jobs.Keys.CheckKEK(ctx); err != nil {
		return nil, err
	}
	a.srv = server.New(a.cfg, log)
	hist, closeHistory, err := c.history(ctx, c.DataDir, c.BucketReserve, a.store, a.cfg.Metrics, log)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, closeHistory)
	if hist != nil {
		a.history, a.sweeps = hist, append(a.sweeps, hist.Sweep)
	}
	return a, nil
}

// listeners are every address the server serves on, bound before anything
// is written: a port in use stops the server without a data directory, a
// database or a migration to show for it.
type listeners struct{ grpc, http, history, metrics net.Listener }

// assembly is the server as the flags build it.
type assembly struct {
	perimeter  *perimeter
	store      store.Store
	cfg        server.Config
	registry   *prometheus.Registry
	jobs       *jobs.Manager
	jobMetrics *telemetry.JobMetrics
	srv        *server.Server
	history    *history.Service
	sweeps     []func(context.Context, time.Time) error
	closers    []func()
}

func (l *listeners) close() {
	for _, lis := range []net.Listener{l.grpc, l.http, l.history, l.metrics} {
		if lis != nil {
			_ = lis.Close()
		}
	}
}

func (a *assembly) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}
