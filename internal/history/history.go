// Package history is a history server for XMTP device sync: an app
// installation uploads an encrypted archive (POST /upload, the raw archive
// as the body; the answer's text is an id) and sends the URL
// {server}/files/{id} with the archive's key inside the end-to-end
// encrypted sync group; another installation downloads it (GET) and
// imports it (libxmtp crates/xmtp_mls/src/groups/device_sync/worker.rs).
//
// The server never holds the key: it stores opaque bytes in a bucket
// (gocloud.dev/blob, as backup jobs do), one catalog row each
// (store.HistoryFiles), and never holds a body whole in memory. No route
// takes a key, and no log line holds an id's full value.
//
// Unlike xmtp-message-history-server, every upload is bounded: in size
// (413 before a byte is stored when the length is declared, and as soon as
// the body passes it otherwise), in pace (a body that stalls is cut), in
// rate and concurrency per client address (429), in number at once (503)
// and in total bytes (the oldest files are evicted to make room; 507 when
// none can be). Files expire after a retention window, swept by the
// expiry worker on every replica.
package history

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/blob"
	"golang.org/x/time/rate"

	"github.com/contentbackup/contentbackup/internal/store"
)

// Defaults; every one is a flag of the server (README's flag table).
const (
	// DefaultMaxUpload: device-sync archives of a long history pass the
	// reference server's 15,000,000 bytes; 100 MiB keeps one upload's
	// cost bounded while taking them.
	DefaultMaxUpload = 100 << 20
	// DefaultRetention is the reference server's: files older are swept.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultMaxTotal bounds every file stored together.
	DefaultMaxTotal = 10 << 30
	// DefaultUploadsPerMinute and DefaultUploadBurst: an installation
	// uploads once per sync request; a client address (a NAT may hold
	// many installations) gets this many a minute, after a burst.
	DefaultUploadsPerMinute = 6
	DefaultUploadBurst      = 6
	// DefaultUploadsPerClient run at once from one address.
	DefaultUploadsPerClient = 2
	// DefaultUploadsAtOnce across every client: each holds a blob
	// writer's buffer (an S3 part, 5 MiB).
	DefaultUploadsAtOnce = 16
	// DefaultDownloadsPerClient run at once from one address, and
	// DefaultDownloadsAtOnce from every client: each holds a connection
	// and a bucket reader for as long as its reader reads.
	DefaultDownloadsPerClient = 4
	DefaultDownloadsAtOnce    = 64
	// DefaultStall: a body that sends nothing for this long is cut.
	DefaultStall = 30 * time.Second
	// DefaultBodyGrace and DefaultMinBodyRate: past the grace, a body
	// must have arrived at this average rate, or it is cut (408): a
	// trickler cannot hold an upload slot. They bound an upload's life
	// (MaxUploadTime), which is how long its reservation outlives a
	// server that died under it.
	DefaultBodyGrace   = 10 * time.Second
	DefaultMinBodyRate = 32 << 10
	// DefaultMinEvictAge: a full server evicts only files at least this
	// old, so an upload cannot push out a file its peer has not yet had
	// the time to download.
	DefaultMinEvictAge = 10 * time.Minute
	// DefaultReserveAhead is what an upload reserves ahead of the bytes
	// that have arrived at first; the allowance then grows with what has
	// arrived, up to maxReserveAhead, so a 100 MiB upload makes some
	// thirty reservations. A declared length is not a reservation: a
	// client that declares 100 MiB and sends nothing holds nothing.
	DefaultReserveAhead = 64 << 10
	maxReserveAhead     = 4 << 20
	// idBytes is an id's randomness: 160 bits, 40 hex digits.
	idBytes = 20
	// blobBuffer is the blob writer's buffer: S3's smallest part.
	blobBuffer = 5 << 20
	// maxClients bounds the per-address limiters kept; idle ones go first.
	maxClients = 100_000
)

// Refusal reasons, as the metrics count them.
const (
	RefusedTooLarge = "too_large"
	RefusedRate     = "rate"
	RefusedClient   = "client_concurrency"
	RefusedBusy     = "busy"
	RefusedFull     = "full"
	RefusedStalled  = "stalled"
	RefusedNotFound = "not_found"
)

// Metrics hears what the server does; every field is optional.
type Metrics struct {
	Uploaded   func(bytes int64)
	Downloaded func(bytes int64)
	Expired    func(files int, bytes int64)
	Refused    func(reason string)
	Stored     func(bytes, files int64)
	// MaxTotal hears the configured total once, at New.
	MaxTotal func(bytes int64)
}

// Config is what a Service runs with.
type Config struct {
	Store  store.HistoryFiles
	Bucket *blob.Bucket
	// Prefix starts every object's key (default "history/").
	Prefix string
	// MaxUpload bounds one upload's bytes; MaxTotal every file stored.
	MaxUpload, MaxTotal int64
	Retention           time.Duration
	// OneTime deletes a file once it has been downloaded whole.
	OneTime bool
	// UploadsPerMinute and UploadBurst are each client address's rate;
	// UploadsPerClient its uploads at once; UploadsAtOnce everyone's.
	UploadsPerMinute float64
	UploadBurst      int
	UploadsPerClient int
	UploadsAtOnce    int
	// DownloadsPerClient and DownloadsAtOnce bound the downloads running
	// at once, from one address and from everyone (defaults above).
	DownloadsPerClient int
	DownloadsAtOnce    int
	Stall              time.Duration
	// BodyGrace and MinBodyRate (bytes a second): past the grace, a body
	// slower on average is cut.
	BodyGrace   time.Duration
	MinBodyRate int64
	// MinEvictAge: younger files are never evicted to make room.
	MinEvictAge time.Duration
	// ReserveAhead is an upload's first allowance past what has arrived
	// (DefaultReserveAhead).
	ReserveAhead int64
	// FreeBytes, when set, reads the free space of the disk under the
	// bucket (a file bucket's), and an upload's reservation must leave
	// DiskReserve bytes of it free: with the default layout the bucket is
	// on the store's disk, and uploads must never take the space the
	// store's writes need (issue 47, finding 1).
	FreeBytes   func() (uint64, error)
	DiskReserve int64
	// CORSOrigins answered; "*" any (default).
	CORSOrigins []string
	Log         *zap.Logger
	Metrics     Metrics
	Now         func() time.Time
}

// Service serves the history protocol and sweeps expired files.
type Service struct {
	cfg    Config
	atOnce chan struct{}
	// downloadsAtOnce holds a place for each download running.
	downloadsAtOnce chan struct{}
	mu              sync.Mutex
	clients         map[string]*client
	// unwritten is what the uploads running here have reserved and not
	// written yet: bytes the disk's free space does not show taken, which
	// the disk reserve counts as taken (a check per reservation would
	// otherwise let every upload at once spend the same free bytes).
	unwritten atomic.Int64
	// diskMu orders reservations here: each reads the disk's free space
	// and promises from it before the next reads it.
	diskMu sync.Mutex
}

type client struct {
	limiter *rate.Limiter
	active  int // uploads running
	// downloads running
	downloads int
	seen      time.Time
}

// New returns a service with cfg's zero fields defaulted.
func New(cfg Config) *Service {
	if cfg.Prefix == "" {
		cfg.Prefix = "history/"
	}
	if cfg.MaxUpload <= 0 {
		cfg.MaxUpload = DefaultMaxUpload
	}
	if cfg.MaxTotal <= 0 {
		cfg.MaxTotal = DefaultMaxTotal
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.UploadsPerMinute <= 0 {
		cfg.UploadsPerMinute = DefaultUploadsPerMinute
	}
	if cfg.UploadBurst <= 0 {
		cfg.UploadBurst = DefaultUploadBurst
	}
	if cfg.UploadsPerClient <= 0 {
		cfg.UploadsPerClient = DefaultUploadsPerClient
	}
	if cfg.UploadsAtOnce <= 0 {
		cfg.UploadsAtOnce = DefaultUploadsAtOnce
	}
	if cfg.ReserveAhead <= 0 {
		cfg.ReserveAhead = DefaultReserveAhead
	}
	if cfg.MinEvictAge <= 0 {
		cfg.MinEvictAge = DefaultMinEvictAge
	}
	if cfg.Stall <= 0 {
		cfg.Stall = DefaultStall
	}
	if cfg.BodyGrace <= 0 {
		cfg.BodyGrace = DefaultBodyGrace
	}
	if cfg.MinBodyRate <= 0 {
		cfg.MinBodyRate = DefaultMinBodyRate
	}
	if cfg.CORSOrigins == nil {
		cfg.CORSOrigins = []string{"*"}
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics.MaxTotal != nil {
		cfg.Metrics.MaxTotal(cfg.MaxTotal)
	}
	if cfg.DownloadsPerClient <= 0 {
		cfg.DownloadsPerClient = DefaultDownloadsPerClient
	}
	if cfg.DownloadsAtOnce <= 0 {
		cfg.DownloadsAtOnce = DefaultDownloadsAtOnce
	}
	return &Service{cfg: cfg, atOnce: make(chan struct{}, cfg.UploadsAtOnce), downloadsAtOnce: make(chan struct{}, cfg.DownloadsAtOnce), clients: map[string]*client{}}
}

// ServeHTTP routes the protocol: GET / (health), POST /upload,
// GET|HEAD /files/{id}, and CORS preflights. Nothing else exists.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.cors(w, r)
	path := r.URL.Path
	switch {
	case path == "/":
		if !allow(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	case path == "/upload":
		if allow(w, r, http.MethodPost) {
			s.upload(w, r)
		}
	case strings.HasPrefix(path, "/files/"):
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.download(w, r, strings.TrimPrefix(path, "/files/"))
		}
	default:
		http.NotFound(w, r)
	}
}

// allow answers a preflight (204) or a method the route lacks (405), and
// reports whether the request goes on.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	if !slices.Contains(methods, r.Method) {
		closeAfter(w)
		w.Header().Set("Allow", strings.Join(methods, ", ")+", OPTIONS")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return false
	}
	return true
}

// cors answers browser SDKs, which upload from an app's page: the origin
// when it is allowed (any with "*"). No credentials are ever allowed, so
// a page gets nothing a plain client would not.
func (s *Service) cors(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	h := w.Header()
	switch {
	case slices.Contains(s.cfg.CORSOrigins, "*"):
		h.Set("Access-Control-Allow-Origin", "*")
	case slices.Contains(s.cfg.CORSOrigins, origin):
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
	default:
		return
	}
	h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type")
	h.Set("Access-Control-Expose-Headers", "Content-Length")
	h.Set("Access-Control-Max-Age", "600")
}

func (s *Service) refuse(w http.ResponseWriter, code int, reason, msg string) {
	if s.cfg.Metrics.Refused != nil {
		s.cfg.Metrics.Refused(reason)
	}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable || code == http.StatusInsufficientStorage {
		w.Header().Set("Retry-After", "10")
	}
	closeAfter(w)
	http.Error(w, msg, code)
}

// drainGrace is how long a refused request's connection waits for the
// rest of a small body before it closes (httpjson.DrainGrace says why).
const drainGrace = time.Second

// closeAfter makes the answer the connection's last, sent before any of
// the body is read, with the rest read only until drainGrace. Without it
// Go's server reads what is left of a small body before it writes the
// answer, and when it closes the body, with no deadline: a refused
// anonymous upload whose declared body trickled was never answered
// (issue 47, finding 5).
func closeAfter(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainGrace))
}
