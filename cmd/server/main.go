// Command server runs the contentbackup gRPC service.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/buildinfo"
	"github.com/contentbackup/contentbackup/internal/drivers"
	"github.com/contentbackup/contentbackup/internal/expiry"
	"github.com/contentbackup/contentbackup/internal/jobs"
	"github.com/contentbackup/contentbackup/internal/keyring"
	"github.com/contentbackup/contentbackup/internal/records"
	"github.com/contentbackup/contentbackup/internal/server"
	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/sqlite"
	"github.com/contentbackup/contentbackup/internal/telemetry"
)

type cli struct {
	CheckPolicy string           `name:"check-policy" type:"existingfile" help:"Check a policy file as a reload would (before SIGHUP), print its disabled principals, and exit: 0 when it would load."`
	Serve       serveCmd         `cmd:"" default:"withargs" help:"Serve gRPC (the default command)."`
	Migrate     migrateCmd       `cmd:"" help:"Apply pending schema migrations to the store and exit."`
	Version     kong.VersionFlag `help:"Print the version and exit."`
}

// storeFlags choose the store: Postgres when a database URL is set, the
// embedded SQLite file under the data directory otherwise.
type storeFlags struct {
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" help:"Postgres URL (postgres://user:pass@host:5432/db); empty uses the embedded store in --data-dir."`
	DataDir     string `default:"./data" env:"DATA_DIR" help:"Directory of the embedded SQLite store, used when no database URL is set."`
}

type logFlags struct {
	LogLevel  string `default:"info" env:"LOG_LEVEL" enum:"debug,info,warn,error" help:"Lowest level logged: debug, info, warn or error."`
	LogFormat string `default:"json" env:"LOG_FORMAT" enum:"json,console" help:"Log encoding: json or console."`
}

// securityFlags set the perimeter: TLS, who may call, and what signs page
// tokens.
type securityFlags struct {
	TLSCert       string        `name:"tls-cert" env:"TLS_CERT" help:"PEM certificate (chain) to serve TLS with; re-read every --tls-refresh, so a rotated certificate needs no restart."`
	TLSKey        string        `name:"tls-key" env:"TLS_KEY" help:"PEM private key of --tls-cert."`
	TLSClientCA   string        `name:"tls-client-ca" env:"TLS_CLIENT_CA" help:"PEM CA bundle that verifies client certificates (mutual TLS); a verified certificate proves the principal the policy names for it."`
	TLSClientAuth string        `name:"tls-client-auth" env:"TLS_CLIENT_AUTH" default:"verify-if-given" enum:"verify-if-given,require" help:"With --tls-client-ca: verify-if-given lets token callers in without a certificate; require refuses the handshake without one."`
	TLSRefresh    time.Duration `name:"tls-refresh" env:"TLS_REFRESH" default:"10s" help:"How often the TLS files are re-read."`
	Insecure      bool          `env:"INSECURE" help:"Serve plaintext on a non-loopback address (behind a mesh that terminates mTLS). Loopback addresses never need it."`

	AuthPolicy        string        `name:"auth-policy" env:"AUTH_POLICY" help:"Policy file (YAML) mapping token digests and certificate identities to principals; re-read on SIGHUP and when it changes."`
	AuthPolicyRefresh time.Duration `name:"auth-policy-refresh" env:"AUTH_POLICY_REFRESH" default:"5s" help:"How often the policy file is checked for changes."`
	JWKS              string        `name:"jwt-jwks" env:"JWT_JWKS" help:"JWKS of the identity provider whose JWTs prove principals: a file or an https URL (cached, refreshed every --jwt-refresh)."`
	JWTIssuer         string        `name:"jwt-issuer" env:"JWT_ISSUER" help:"Required iss of a JWT."`
	JWTAudience       string        `name:"jwt-audience" env:"JWT_AUDIENCE" help:"Required aud of a JWT."`
	JWTOwnerClaim     string        `name:"jwt-owner-claim" env:"JWT_OWNER_CLAIM" default:"owner" help:"Claim naming the owner (string) or owners (list) a JWT may act for."`
	JWTScopeClaim     string        `name:"jwt-scope-claim" env:"JWT_SCOPE_CLAIM" default:"scope" help:"Claim holding the scopes: a space-separated string or a list."`
	JWTRefresh        time.Duration `name:"jwt-refresh" env:"JWT_REFRESH" default:"5m" help:"How often the JWKS is fetched or re-read."`
	JWTLeeway         time.Duration `name:"jwt-leeway" env:"JWT_LEEWAY" default:"30s" help:"Clock skew tolerated on exp and nbf."`

	PublicReflection bool   `name:"public-reflection" env:"PUBLIC_REFLECTION" help:"Serve gRPC reflection without credentials (by default any proven principal may use it)."`
	PageTokenKeyFile string `name:"page-token-key-file" env:"PAGE_TOKEN_KEY_FILE" help:"File of at least 32 bytes that signs page tokens; replicas behind one address need the same. Unset: a random key per process."`
}

type serveCmd struct {
	Config           kong.ConfigFlag `group:"serving" name:"config" env:"CONFIG_FILE" type:"existingfile" help:"A JSON file of flags for the long tail ({\"max-archive-streams\": 32}); the command line and the environment win over it, and a key that names no flag is an error."`
	Listen           string          `default:"127.0.0.1:50051" env:"LISTEN_ADDR" group:"serving" help:"Address to serve gRPC on."`
	HTTPListen       string          `name:"http-listen" group:"serving" env:"HTTP_LISTEN_ADDR" help:"Address to serve the same services over HTTP on (Connect protocol with JSON, gRPC-Web), for callers without gRPC. Unset: 127.0.0.1:50052 when --listen is its default, else off. With the gRPC listener's TLS when it has TLS; plaintext only on loopback or with --insecure."`
	PreviewWords     string          `group:"serving" name:"preview-words" type:"existingfile" env:"PREVIEW_WORDS" help:"A YAML file of notification preview words per locale and content type, replacing the built-in entries it gives (docs/previews.md)."`
	ShutdownGrace    time.Duration   `group:"serving" default:"10s" env:"SHUTDOWN_GRACE" help:"How long in-flight calls may run after SIGINT or SIGTERM."`
	securityFlags    `group:"security"`
	storeFlags       `group:"store"`
	Migrate          bool `group:"store" default:"true" negatable:"" env:"MIGRATE" help:"Apply pending schema migrations at start (--no-migrate to require an up-to-date schema)."`
	expiryFlags      `group:"store"`
	MaxRecvBytes     int   `group:"limits" default:"33554432" env:"MAX_RECV_BYTES" help:"Largest request message accepted, in bytes."`
	MaxDecodeBatch   int   `group:"limits" default:"1000" env:"MAX_DECODE_BATCH" help:"Most envelopes one DecodeBatch call takes."`
	MaxNestingDepth  int   `group:"limits" default:"16" env:"MAX_NESTING_DEPTH" help:"Deepest nesting of content in content (replies) that is decoded."`
	MaxBatchExpanded int64 `group:"limits" default:"100663296" env:"MAX_BATCH_EXPANDED" help:"Bytes one decoding call (Decode, DecodeBatch, a ListMessages or StreamMessages page) may expand to: decompressed content and decoded values, failed decodes included."`
	MaxAppendBatch   int   `group:"limits" default:"10000" env:"MAX_APPEND_BATCH" help:"Most messages one AppendMessages call takes."`
	limitFlags       `group:"limits"`
	jobFlags         `group:"jobs"`
	historyFlags     `group:"history"`
	logFlags         `group:"observability"`
	MetricsListen    string `group:"observability" default:"127.0.0.1:9464" env:"METRICS_ADDR" help:"Address to serve Prometheus metrics on, at /metrics; empty turns them off."`
	PProf            bool   `group:"observability" name:"pprof" env:"PPROF" help:"Also serve Go's profiles (net/http/pprof) at /debug/pprof/ on the metrics address: for an operator on a trusted network, never a public one."`

	OTLPEndpoint     string  `group:"observability" name:"otlp-endpoint" env:"OTEL_EXPORTER_OTLP_ENDPOINT" help:"OTLP/gRPC collector (host:port) to send traces to: a span per call and per Postgres query. Empty: no tracing."`
	OTLPInsecure     bool    `group:"observability" name:"otlp-insecure" env:"OTEL_EXPORTER_OTLP_INSECURE" help:"Send traces to the collector without TLS (a sidecar on loopback)."`
	TraceSampleRatio float64 `group:"observability" name:"trace-sample-ratio" env:"TRACE_SAMPLE_RATIO" default:"1" help:"Fraction of new traces kept; calls with a sampled parent follow it."`
}

// limitFlags bound memory, streams and record sizes (RELIABILITY.md).
type limitFlags struct {
	MemoryBudget              int64         `name:"memory-budget" env:"MEMORY_BUDGET" default:"${memory_budget}" help:"Server-wide bytes that decompression, decoding, archive readers and import read-ahead may hold at once."`
	ListPageBytes             int           `name:"list-page-bytes" env:"LIST_PAGE_BYTES" default:"${list_page_bytes}" help:"Largest ListMessages response, and each StreamMessages response; a single larger message still comes back, alone."`
	MaxGroupBytes             int           `name:"max-group-bytes" env:"MAX_GROUP_BYTES" default:"${max_group_bytes}" help:"Largest group record, at PutGroup and import."`
	MaxMessageBytes           int           `name:"max-message-bytes" env:"MAX_MESSAGE_BYTES" default:"${max_message_bytes}" help:"Largest message content, at AppendMessages and import."`
	MaxConsentBytes           int           `name:"max-consent-bytes" env:"MAX_CONSENT_BYTES" default:"${max_consent_bytes}" help:"Largest consent record, at SetConsent and import."`
	ImportReadAhead           int64         `name:"import-read-ahead" env:"IMPORT_READ_AHEAD" default:"${import_read_ahead}" help:"Bytes of records an import reads ahead of applying; at least four of the largest records."`
	ArchiveMaxWindow          int           `name:"archive-max-window" env:"ARCHIVE_MAX_WINDOW" default:"${archive_max_window}" help:"Largest zstd window an archive may declare (the reference writes 2 MiB)."`
	MaxArchiveStreams         int           `name:"max-archive-streams" env:"MAX_ARCHIVE_STREAMS" default:"${max_archive_streams}" help:"Archive streams (Export, Import, ReadMetadata, Verify) open at once; past it RESOURCE_EXHAUSTED."`
	MaxStreamsPerOwner        int           `name:"max-archive-streams-per-owner" env:"MAX_ARCHIVE_STREAMS_PER_OWNER" default:"${max_archive_streams_per_owner}" help:"Archive streams open at once for one owner (or, naming none, one principal)."`
	MaxMessageStreams         int           `name:"max-message-streams" env:"MAX_MESSAGE_STREAMS" default:"${max_message_streams}" help:"StreamMessages calls open at once; past it RESOURCE_EXHAUSTED."`
	MaxMessageStreamsPerOwner int           `name:"max-message-streams-per-owner" env:"MAX_MESSAGE_STREAMS_PER_OWNER" default:"${max_message_streams_per_owner}" help:"StreamMessages calls open at once for one owner."`
	StreamIdleTimeout         time.Duration `name:"stream-idle-timeout" env:"STREAM_IDLE_TIMEOUT" default:"${stream_idle_timeout}" help:"A client stream that sends nothing for this long ends with DEADLINE_EXCEEDED."`
	MaxConnectionAge          time.Duration `name:"max-connection-age" env:"MAX_CONNECTION_AGE" default:"${max_connection_age}" help:"Connections are closed after this long (calls in flight get the grace), so clients spread over replicas."`
	MaxConnectionAgeGrace     time.Duration `name:"max-connection-age-grace" env:"MAX_CONNECTION_AGE_GRACE" default:"${max_connection_age_grace}" help:"How long calls in flight may finish on a connection past its age."`
	StoreCheckInterval        time.Duration `name:"store-check-interval" env:"STORE_CHECK_INTERVAL" default:"2s" help:"How often health pings the store; NOT_SERVING while it does not answer."`
}

func (f limitFlags) limits(callExpand int64) server.Limits {
	return server.Limits{
		MemoryBytes: f.MemoryBudget, CallExpandBytes: callExpand, ListPageBytes: f.ListPageBytes,
		Records: records.Limits{
			GroupBytes: f.MaxGroupBytes, MessageContentBytes: f.MaxMessageBytes,
			MessageBytes: records.DefaultLimits.MessageBytes, ConsentBytes: f.MaxConsentBytes,
		},
		ImportReadAheadBytes: f.ImportReadAhead, ArchiveWindowBytes: f.ArchiveMaxWindow,
		MaxArchiveStreams: f.MaxArchiveStreams, MaxArchiveStreamsPerOwner: f.MaxStreamsPerOwner,
		MaxMessageStreams: f.MaxMessageStreams, MaxMessageStreamsPerOwner: f.MaxMessageStreamsPerOwner,
		StreamIdleTimeout: f.StreamIdleTimeout, MaxConnectionAge: f.MaxConnectionAge, MaxConnectionAgeGrace: f.MaxConnectionAgeGrace,
	}
}

// expiryFlags bound the purge of expired disappearing messages.
type expiryFlags struct {
	ExpiryPurgeInterval time.Duration `name:"expiry-purge-interval" env:"EXPIRY_PURGE_INTERVAL" default:"1m" help:"How often messages past their expires_at_ns are deleted from the store (META-051); 0 turns the purge off (expired messages are still never listed nor exported)."`
	ExpiryPurgeBatch    int           `name:"expiry-purge-batch" env:"EXPIRY_PURGE_BATCH" default:"1000" help:"Expired messages of one owner deleted in one transaction, before the purge moves to the next owner."`
	ExpiryPurgeMax      int64         `name:"expiry-purge-max" env:"EXPIRY_PURGE_MAX" default:"100000" help:"Expired messages one purge run deletes at most; the next run goes on from the owner it reached."`
}

// purge is the expiry purge the flags configure, with its metrics on reg
// when set; nil when it is off.
func (f expiryFlags) purge(st store.Store, reg prometheus.Registerer, log *zap.Logger, sweeps ...func(context.Context, time.Time) error) *expiry.Worker {
	if f.ExpiryPurgeInterval <= 0 {
		log.Warn("the purge of expired messages is off: they stay stored, though never listed nor exported")
		if len(sweeps) > 0 {
			log.Warn("the expiry worker is off: history files are not deleted past their retention (downloads of them are 404)")
		}
		return nil
	}
	cfg := expiry.Config{Store: st, Interval: f.ExpiryPurgeInterval, PerOwner: f.ExpiryPurgeBatch, MaxPerRun: f.ExpiryPurgeMax, Log: log.Named("expiry"), Sweeps: sweeps}
	telemetry.InstrumentExpiry(reg, &cfg)
	return expiry.New(cfg)
}

// jobFlags configure server-side jobs (BackupService): where archives may
// go, which keys they may be sealed with, and schedules.
type jobFlags struct {
	JobBuckets            []string      `name:"job-bucket" env:"JOB_BUCKETS" help:"A bucket jobs may use, as name=URL (repeatable; comma-separated in the variable): file:///dir, s3://bucket?region=...&endpoint=..., gs://bucket, azblob://container (gocloud.dev URLs; credentials from the environment). Default: local=file://<data-dir>/backups."`
	JobKeys               string        `name:"job-keys" env:"JOB_KEYS" help:"Directory of the local key-encryption key (kek.key, 32 random bytes made on the first export) used when --job-key-keeper is unset; the server rotates it after erasures, keeping the old one as kek-<fingerprint>.key until nothing is under it (docs/erasure.md). Default: <data-dir>/keys."`
	JobKeyKeeper          string        `name:"job-key-keeper" env:"JOB_KEY_KEEPER" help:"gocloud.dev/secrets URL of the KMS key that wraps each backup's own data key (awskms://, gcpkms://, azurekeyvault://; base64key:// for tests). Empty: a local key file in --job-keys, protected by file permissions only."`
	JobKeyRetiring        []string      `name:"job-key-retiring" env:"JOB_KEY_RETIRING" help:"A key-encryption key being rotated away from (repeatable): a gocloud.dev/secrets URL, or the path of a local key file. It opens what it still wraps, and the key worker rewraps every owner key under the current KEK (--job-key-keeper, or the file in --job-keys); once GetKeyStatus shows retired_rows 0, remove it. See docs/erasure.md."`
	KeyWorkerInterval     time.Duration `name:"key-worker-interval" env:"KEY_WORKER_INTERVAL" default:"10m" help:"How often the key worker looks for owner keys under a retiring KEK and backups whose data keys a KEK wraps directly, and rewraps them (it also runs at start)."`
	MaxJobs               int           `name:"max-jobs" env:"MAX_JOBS" default:"${max_jobs}" help:"Jobs this server runs at once; past it a started job waits, queued, for a slot."`
	MaxJobsPerOwner       int           `name:"max-jobs-per-owner" env:"MAX_JOBS_PER_OWNER" default:"${max_jobs_per_owner}" help:"Jobs of one owner this server runs at once, so one owner's flood never holds every slot."`
	MaxQueuedJobsPerOwner int           `name:"max-queued-jobs-per-owner" env:"MAX_QUEUED_JOBS_PER_OWNER" default:"${max_queued_jobs_per_owner}" help:"Jobs of one owner that may wait for a slot; past it StartExport and StartImport are RESOURCE_EXHAUSTED."`
	KeepFinishedJobs      time.Duration `name:"keep-finished-jobs" env:"KEEP_FINISHED_JOBS" default:"${keep_finished_jobs}" help:"How long an ended job's operation stays listed before it is deleted (its backup stays in the catalog)."`
	JobLease              time.Duration `name:"job-lease" env:"JOB_LEASE" default:"${job_lease}" help:"How long a running job outlives its server: a job whose server stopped is taken over by another replica (or failed, past --job-attempts) this long after its last renewal."`
	OwnerBackupQuota      int64         `name:"owner-backup-quota" env:"OWNER_BACKUP_QUOTA" default:"${owner_backup_quota}" help:"Archive bytes one owner's backups may hold in all (the catalog's sum); an export past it is RESOURCE_EXHAUSTED. -1: none."`
	BucketReserve         int64         `name:"bucket-reserve" env:"BUCKET_RESERVE" default:"${bucket_reserve}" help:"Free bytes an export, or a history upload, leaves on a file bucket's filesystem (the store's disk, in the default layout); past it the export is RESOURCE_EXHAUSTED, the upload 507. -1: none."`
	JobAttempts           int           `name:"job-attempts" env:"JOB_ATTEMPTS" default:"${job_attempts}" help:"Runs of one job in all: a job whose server stopped is taken over and run again (an export from the start, an import whole) until it has run this many times; 1 turns takeover off."`
	Schedule              string        `name:"schedule" env:"SCHEDULE" help:"YAML policy of scheduled exports (name, cron, owners, bucket, prefix, keep or retention, full_every, verify); see docs/backup-jobs.md."`

	// scheduleClock is the clock schedules read; nil is time.Now. No flag
	// sets it: the fleet tests, which run replicas in their process, skew
	// one replica's.
	scheduleClock func() time.Time
}

// jobs opens the keys and buckets jobs use, creating the embedded
// defaults under the data directory.
func (f jobFlags) jobs(ctx context.Context, dataDir string) (*jobs.Config, func(), error) {
	urls := f.JobBuckets
	if len(urls) == 0 {
		abs, err := filepath.Abs(filepath.Join(dataDir, "backups"))
		if err != nil {
			return nil, nil, err
		}
		// Temporary files beside their objects (one filesystem, so the
		// commit is a rename), and no attribute files beside them.
		urls = []string{"local=file://" + filepath.ToSlash(abs) + "?create_dir=1&no_tmp_dir=1&metadata=skip"}
	}
	buckets, err := jobs.ParseBuckets(urls)
	if err != nil {
		return nil, nil, err
	}
	// Neither the key directory nor the file bucket is made at start: a
	// server on a read-only filesystem that runs no jobs needs neither.
	keyDir := f.JobKeys
	if keyDir == "" {
		keyDir = filepath.Join(dataDir, "keys")
	}
	kek, err := keyring.Open(ctx, f.JobKeyKeeper, keyDir)
	if err != nil {
		return nil, nil, err
	}
	var retiring []*keyring.KEK
	closeKEKs := func() {
		_ = kek.Close()
		for _, k := range retiring {
			_ = k.Close()
		}
	}
	for _, spec := range f.JobKeyRetiring {
		k, err := keyring.OpenRetiring(ctx, spec)
		if err != nil {
			closeKEKs()
			return nil, nil, fmt.Errorf("--job-key-retiring: %w", err)
		}
		retiring = append(retiring, k)
	}
	b := jobs.NewBuckets(buckets)
	cfg := &jobs.Config{KEK: kek, RetiringKEKs: retiring, Buckets: b, AbortUploads: drivers.AbortS3Uploads, MaxRunning: f.MaxJobs, MaxRunningPerOwner: f.MaxJobsPerOwner,
		MaxQueuedPerOwner: f.MaxQueuedJobsPerOwner, KeepFinished: f.KeepFinishedJobs, Lease: f.JobLease, MaxAttempts: f.JobAttempts,
		OwnerQuota: f.OwnerBackupQuota, BucketReserve: f.BucketReserve,
		ScheduleClock: f.scheduleClock}
	return cfg, func() { _ = b.Close(); closeKEKs() }, nil
}

type migrateCmd struct {
	storeFlags `group:"store"`
	logFlags   `group:"observability"`
}

// helpGroups are --help's sections, in order.
var helpGroups = kong.ExplicitGroups([]kong.Group{
	{Key: "serving", Title: "Serving", Description: "Where the gRPC and HTTP listeners are and how they stop."},
	{Key: "security", Title: "Security", Description: "TLS, who may call (the policy, JWTs) and what signs page tokens."},
	{Key: "store", Title: "Store", Description: "PostgreSQL or the embedded SQLite, its migrations and the expiry purge."},
	{Key: "limits", Title: "Limits", Description: "The bytes, calls and streams a caller or the server may hold (RELIABILITY.md)."},
	{Key: "jobs", Title: "Backup jobs", Description: "Buckets, keys, slots, leases, quotas and schedules (docs/backup-jobs.md, docs/erasure.md)."},
	{Key: "history", Title: "History server", Description: "The device-sync history server (docs/history-server.md)."},
	{Key: "observability", Title: "Observability", Description: "Logs, metrics, profiles and traces."},
})

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], console{stdout: os.Stdout, stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// console is where the server writes: its logs and errors to stderr, what
// a command prints to stdout. main passes the process's; tests pass
// buffers and run the server in their own process.
type console struct{ stdout, stderr io.Writer }

// exited is kong's exit (after --help, --version or a parse error) as a
// value: run recovers it and returns its code, so a test's process is not
// ended by a flag.
type exited int

// run is the binary: it parses args, runs the command they name until ctx
// ends (main's ends on SIGINT or SIGTERM), and returns the exit code.
func run(ctx context.Context, args []string, con console) int {
	return runWith(ctx, args, con, nil)
}

// runWith is run with adjust applied to the parsed flags before the
// command runs: how tests set what no flag may.
func runWith(ctx context.Context, args []string, con console, adjust func(*cli)) (code int) {
	var c cli
	parser, err := kong.New(&c, append(parserOptions(), kong.Configuration(configFile(serveFlagNames())),
		kong.Writers(con.stdout, con.stderr), kong.Exit(func(code int) { panic(exited(code)) }))...)
	if err != nil {
		fmt.Fprintln(con.stderr, "server:", err)
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(exited)
			if !ok {
				panic(r)
			}
			code = int(e)
		}
	}()
	kctx, err := parser.Parse(args)
	parser.FatalIfErrorf(err)
	if c.CheckPolicy != "" {
		disabled, err := auth.CheckPolicyFile(c.CheckPolicy)
		if err != nil {
			fmt.Fprintln(con.stderr, "server: policy refused:", err)
			return 1
		}
		fmt.Fprintf(con.stdout, "policy %s: ok; disabled principals (no credential): %d %v\n", c.CheckPolicy, len(disabled), disabled)
		return 0
	}
	if adjust != nil {
		adjust(&c)
	}
	kctx.BindTo(ctx, (*context.Context)(nil))
	if err := kctx.Run(con); err != nil {
		fmt.Fprintln(con.stderr, "server:", err)
		return 1
	}
	return 0
}

// Run applies the migrations and exits.
func (m *migrateCmd) Run(ctx context.Context, con console) error {
	log, err := newLogger(m.LogLevel, m.LogFormat, con.stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	s, err := openStore(ctx, m.storeFlags, true, 0, log, nil)
	if err != nil {
		return err
	}
	return s.Close()
}

// openStore opens Postgres when a database URL is set, the embedded store
// otherwise, applying pending migrations when migrate is set.
func openStore(ctx context.Context, f storeFlags, migrate bool, poolSize int32, log *zap.Logger, tracing *telemetry.Tracing) (store.Store, error) {
	if f.DatabaseURL != "" {
		opts := postgres.Options{Migrate: migrate, MaxConns: poolSize}
		if tracing != nil {
			opts.Tracer = tracing.PgxTracer()
		}
		s, err := postgres.Open(ctx, f.DatabaseURL, opts)
		if err != nil {
			return nil, err
		}
		// The URL may hold a password: log only where it points.
		cfg := s.Pool().Config().ConnConfig
		fields := []zap.Field{zap.String("engine", "postgres"), zap.String("host", cfg.Host), zap.String("database", cfg.Database), zap.Bool("migrated", migrate),
			zap.Int32("pool_max_conns", s.Pool().Config().MaxConns)}
		if len(s.Distributed) > 0 {
			fields = append(fields, zap.Strings("citus_distributed", s.Distributed))
		}
		log.Info("store", fields...)
		return s, nil
	}
	s, err := sqlite.Open(ctx, f.DataDir, sqlite.Options{Migrate: migrate})
	if err != nil {
		return nil, err
	}
	log.Info("store", zap.String("engine", "sqlite"), zap.String("path", filepath.Join(f.DataDir, sqlite.FileName)), zap.Bool("migrated", migrate))
	return s, nil
}

// poolSize is the PostgreSQL pool's size when --database-url sets no
// pool_max_conns: a connection for each archive stream and each job, which
// hold one as long as they stream (an export's snapshot), and the
// greater of 4 and the CPUs for everything else, so a full house of
// exports never leaves a unary call waiting for a connection.
func (c *serveCmd) poolSize() int32 {
	return int32(c.MaxArchiveStreams + c.MaxJobs + max(4, runtime.NumCPU()))
}

// httpAddr is where HTTP/JSON is served: --http-listen, or beside the
// default gRPC address when that is where gRPC listens.
func (c *serveCmd) httpAddr() string {
	if c.HTTPListen == "" && c.Listen == "127.0.0.1:50051" {
		return "127.0.0.1:50052"
	}
	return c.HTTPListen
}

// metricsMux routes the metrics address: /metrics, the probes and, with
// profiles, Go's profiles.
func metricsMux(reg *prometheus.Registry, srv *server.Server, policy *auth.PolicySource, profiles bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Liveness says only that the process answers: a database outage must
	// not restart it. Readiness follows the health service.
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !srv.Serving(r.Context()) {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
		// Still ready (the policy in force works), but say that the file
		// on disk is not what is in force.
		if policy != nil {
			if st := policy.Status(); st.Failing != "" {
				fmt.Fprintf(w, "auth policy: the latest reload was refused (%d refused since start); the policy loaded at %s stays in force: %s\n",
					st.Failures, st.LoadedAt.UTC().Format(time.RFC3339), st.Failing)
			}
		}
	})
	if profiles {
		// On this mux only, and only when asked: the profiles name code
		// paths and cost CPU. (The package also registers itself on
		// http.DefaultServeMux, which this binary never serves.)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func newLogger(level, format string, out io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.Set(level); err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	cfg := zap.NewProductionConfig()
	enc := zapcore.NewJSONEncoder(cfg.EncoderConfig)
	if format == "console" {
		// Development's encoder, without its stack after every warning,
		// which buries the line that matters: a stack is for a bug (error
		// and above), as in json.
		cfg = zap.NewDevelopmentConfig()
		enc = zapcore.NewConsoleEncoder(cfg.EncoderConfig)
	}
	sink := zapcore.Lock(zapcore.AddSync(out))
	core := zapcore.NewCore(enc, sink, lvl)
	if s := cfg.Sampling; s != nil {
		core = zapcore.NewSamplerWithOptions(core, time.Second, s.Initial, s.Thereafter)
	}
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel), zap.ErrorOutput(sink)), nil
}

// buildVersion is set at build time: -ldflags "-X main.buildVersion=...".
var buildVersion string

func version() string { return buildinfo.Version(buildVersion) }
