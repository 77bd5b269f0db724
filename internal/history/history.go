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
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"golang.org/x/time/rate"

	"github.com/contentbackup/contentbackup/internal/fault"
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

// clientLocked is addr's entry, made when it has none (s.mu held).
func (s *Service) clientLocked(addr string, now time.Time) *client {
	c, ok := s.clients[addr]
	if !ok {
		if len(s.clients) >= maxClients {
			s.pruneLocked(now)
		}
		c = &client{limiter: rate.NewLimiter(rate.Limit(s.cfg.UploadsPerMinute/60), s.cfg.UploadBurst)}
		s.clients[addr] = c
	}
	c.seen = now
	return c
}

// admitDownload takes a place for a download to addr: its own downloads
// at once, then everyone's (issue 47: every slot an anonymous client can
// hold is bounded per address). release gives it back.
func (s *Service) admitDownload(addr string) (release func(), code int, reason string) {
	now := s.cfg.Now()
	s.mu.Lock()
	c := s.clientLocked(addr, now)
	if c.downloads >= s.cfg.DownloadsPerClient {
		s.mu.Unlock()
		return nil, http.StatusTooManyRequests, RefusedClient
	}
	c.downloads++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		c.downloads--
		s.mu.Unlock()
	}
	select {
	case s.downloadsAtOnce <- struct{}{}:
	default:
		done()
		return nil, http.StatusServiceUnavailable, RefusedBusy
	}
	return func() { <-s.downloadsAtOnce; done() }, 0, ""
}

// admit takes a place for an upload from addr: the client's rate, its
// uploads at once, then everyone's. release gives it back.
func (s *Service) admit(addr string) (release func(), code int, reason string) {
	now := s.cfg.Now()
	s.mu.Lock()
	c := s.clientLocked(addr, now)
	if c.active >= s.cfg.UploadsPerClient {
		s.mu.Unlock()
		return nil, http.StatusTooManyRequests, RefusedClient
	}
	if !c.limiter.AllowN(now, 1) {
		s.mu.Unlock()
		return nil, http.StatusTooManyRequests, RefusedRate
	}
	c.active++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		c.active--
		s.mu.Unlock()
	}
	select {
	case s.atOnce <- struct{}{}:
	default:
		done()
		return nil, http.StatusServiceUnavailable, RefusedBusy
	}
	return func() { <-s.atOnce; done() }, 0, ""
}

// pruneLocked drops the limiters of clients idle long enough that their
// bucket is full again, and, if that frees too little, the idlest half.
func (s *Service) pruneLocked(now time.Time) {
	full := time.Duration(float64(s.cfg.UploadBurst) / s.cfg.UploadsPerMinute * float64(time.Minute))
	for addr, c := range s.clients {
		if c.active == 0 && c.downloads == 0 && now.Sub(c.seen) > full {
			delete(s.clients, addr)
		}
	}
	if len(s.clients) < maxClients {
		return
	}
	for addr, c := range s.clients {
		if c.active == 0 && c.downloads == 0 && len(s.clients) >= maxClients/2 {
			delete(s.clients, addr)
		}
	}
}

// clientAddr is the request's peer address without its port: the unit of
// the per-client limits. A proxy in front must keep the peer's address
// (PROXY protocol, or the limits apply to the proxy).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// newID is a fresh id: 160 random bits as 40 hex digits.
func newID() string {
	var b [idBytes]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// validID reports an id of the form newID makes.
func validID(id string) bool {
	if len(id) != 2*idBytes {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

// short is an id as logs show it: enough to correlate, never to fetch.
func short(id string) string { return id[:8] + "…" }

// errTooLarge and errStalled end an upload's body.
var (
	errTooLarge = errors.New("the body passed the upload limit")
	errStalled  = errors.New("the body stalled")
)

// MaxUploadTime is the longest an upload can take under cfg: the grace,
// then its largest body at the slowest rate admitted, and a stall. An
// upload's row expires then unless finished, so the sweep releases what
// an upload reserved when its server died under it.
func MaxUploadTime(cfg Config) time.Duration {
	return cfg.BodyGrace + time.Duration(cfg.MaxUpload/cfg.MinBodyRate+1)*time.Second + cfg.Stall
}

// pacedBody reads a request body up to limit bytes, each read under a
// fresh deadline of stall, so a body that stops sending is cut; past
// grace, a body slower than minRate on average is cut too.
type pacedBody struct {
	r       io.Reader
	rc      *http.ResponseController
	stall   time.Duration
	grace   time.Duration
	minRate int64
	limit   int64
	n       int64
	start   time.Time
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.start.IsZero() {
		b.start = time.Now()
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(b.stall))
	if int64(len(p)) > b.limit-b.n+1 {
		p = p[:b.limit-b.n+1]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.limit {
		return n, errTooLarge
	}
	if took := time.Since(b.start); took > b.grace && float64(b.n) < float64(b.minRate)*took.Seconds() {
		return n, errStalled
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return n, errStalled
	}
	return n, err
}

func (s *Service) upload(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	release, code, reason := s.admit(clientAddr(r))
	if release == nil {
		s.refuse(w, code, reason, "too many uploads: retry later")
		return
	}
	defer release()
	if r.ContentLength > s.cfg.MaxUpload {
		s.refuse(w, http.StatusRequestEntityTooLarge, RefusedTooLarge, fmt.Sprintf("the body is %d bytes; this server takes at most %d", r.ContentLength, s.cfg.MaxUpload))
		return
	}
	expected := r.ContentLength
	if expected < 0 {
		expected = s.cfg.MaxUpload // unknown until read
	}
	id := newID()
	now := s.cfg.Now()
	// Until it is finished the row expires with the body's deadline: the
	// sweep releases the reservation of an upload whose server died. It
	// reserves nothing yet: its bytes are reserved as they arrive, with
	// an allowance ahead (reservedWriter).
	f := store.HistoryFile{ID: id, ObjectKey: s.cfg.Prefix + id, State: store.HistoryUploading, Created: now, Expires: now.Add(MaxUploadTime(s.cfg))}
	if err := s.cfg.Store.CreateHistoryFile(ctx, f); err != nil {
		s.fail(w, "record the upload", err)
		return
	}
	n, err := s.store(ctx, r, w, f.ObjectKey, &reserver{s: s, ctx: ctx, id: id, limit: expected})
	if err != nil {
		s.forget(f)
		switch {
		case errors.Is(err, store.ErrHistoryFull):
			s.refuseFull(w, err)
		case errors.Is(err, errTooLarge):
			s.refuse(w, http.StatusRequestEntityTooLarge, RefusedTooLarge, fmt.Sprintf("the body passed %d bytes, the most this server takes", s.cfg.MaxUpload))
		case errors.Is(err, errStalled):
			s.refuse(w, http.StatusRequestTimeout, RefusedStalled, "the body stopped arriving")
		case ctx.Err() != nil:
			// The client went away: nobody reads an answer.
		default:
			s.fail(w, "store the upload", err)
		}
		return
	}
	if err := s.cfg.Store.FinishHistoryFile(ctx, id, n, now.Add(s.cfg.Retention)); err != nil {
		s.forget(f)
		s.fail(w, "record the upload", err)
		return
	}
	if s.cfg.Metrics.Uploaded != nil {
		s.cfg.Metrics.Uploaded(n)
	}
	s.cfg.Log.Info("history file uploaded", zap.String("id", short(id)), zap.Int64("bytes", n))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(id)))
	_, _ = io.WriteString(w, id)
}

// store streams the body into key; an error leaves no object.
func (s *Service) store(ctx context.Context, r *http.Request, w http.ResponseWriter, key string, res *reserver) (int64, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw, err := s.cfg.Bucket.NewWriter(wctx, key, &blob.WriterOptions{ContentType: "application/octet-stream", BufferSize: blobBuffer})
	if err != nil {
		return 0, err
	}
	body := &pacedBody{r: r.Body, rc: http.NewResponseController(w), stall: s.cfg.Stall, grace: s.cfg.BodyGrace, minRate: s.cfg.MinBodyRate, limit: s.cfg.MaxUpload}
	rw := &reservedWriter{w: bw, res: res}
	defer rw.settle()
	n, err := io.Copy(rw, body)
	if err != nil {
		cancel() // aborts the write: nothing is committed
		_ = bw.Close()
		return n, err
	}
	return n, bw.Close()
}

// forget removes an upload that did not finish: its object (if one was
// committed) and its row.
func (s *Service) forget(f store.HistoryFile) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.cfg.Bucket.Delete(ctx, f.ObjectKey); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		s.cfg.Log.Warn("history upload's object not deleted", zap.String("id", short(f.ID)), zap.Error(err))
		return // the row stays, and the sweep deletes both at its expiry
	}
	if err := s.cfg.Store.DeleteHistoryFile(ctx, f.ID); err != nil {
		s.cfg.Log.Warn("history upload's row not deleted", zap.String("id", short(f.ID)), zap.Error(err))
	}
}

// fail answers the server's own trouble without its details.
func (s *Service) fail(w http.ResponseWriter, what string, err error) {
	s.cfg.Log.Error("history: "+what, zap.Error(err))
	code := http.StatusInternalServerError
	switch kind, _ := fault.FileKind(err); {
	case store.Unavailable(err):
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "10")
	case kind == fault.Exhausted || gcerrors.Code(err) == gcerrors.ResourceExhausted:
		// The bucket's disk is full: the client may retry once space is
		// freed, as with the server's own limit (finding 8: it was 500).
		code = http.StatusInsufficientStorage
		w.Header().Set("Retry-After", "10")
	}
	closeAfter(w)
	http.Error(w, "the history server could not "+what, code)
}

// refuseFull answers an upload the total has no room for: 507, to
// retry later.
func (s *Service) refuseFull(w http.ResponseWriter, err error) {
	if !errors.Is(err, store.ErrHistoryFull) {
		s.fail(w, "reserve room for the upload", err)
		return
	}
	s.cfg.Log.Warn("history upload refused: storage full", zap.Error(err))
	s.refuse(w, http.StatusInsufficientStorage, RefusedFull, "the history server is full: retry later")
}

// reserver reserves an upload's room as its bytes arrive: what has
// arrived plus an allowance, never its declared or the largest size, so an
// upload that declares much and sends little holds little (issue 47,
// finding 2).
type reserver struct {
	s        *Service
	ctx      context.Context
	id       string
	limit    int64 // the declared length, or the upload limit
	reserved int64
}

// reserve claims delta more bytes of the total, evicting what it may to
// make room; ErrHistoryFull when it cannot.
func (r *reserver) reserve(delta int64) error {
	if delta <= 0 {
		return nil
	}
	// The disk's free space is read and promised under one lock, so two
	// uploads here never both spend the same free bytes.
	r.s.diskMu.Lock()
	defer r.s.diskMu.Unlock()
	for range 5 {
		limit, err := r.s.totalLimit(r.ctx, delta)
		if err != nil {
			return err
		}
		if err := r.s.makeRoom(r.ctx, delta, limit); err != nil {
			return err
		}
		err = r.s.cfg.Store.ReserveHistoryBytes(r.ctx, r.id, delta, limit)
		if err == nil {
			r.reserved += delta
			r.s.unwritten.Add(delta)
			return nil
		}
		if !errors.Is(err, store.ErrHistoryFull) {
			return err
		}
		// Another upload took the room made: make it again.
	}
	return fmt.Errorf("the room made was taken each time: %w", store.ErrHistoryFull)
}

// totalLimit is the most every file may hold together for delta more
// bytes to be stored now: MaxTotal, and on a disk short of room for
// delta above its reserve (counting what uploads running here have
// reserved and not written), less by the shortfall, so that the oldest
// files are evicted to keep the reserve as they are to keep the total.
// Otherwise anonymous uploads that fill the disk first would hold it
// full for everyone until their retention ends.
func (s *Service) totalLimit(ctx context.Context, delta int64) (int64, error) {
	limit := s.cfg.MaxTotal
	if s.cfg.FreeBytes == nil {
		return limit, nil
	}
	// What is promised is read before what is free: a write between the
	// two then makes the room look smaller, never larger.
	promised := s.unwritten.Load()
	n, err := s.cfg.FreeBytes()
	if err != nil {
		return 0, err
	}
	avail := int64(min(n, 1<<62)) - promised - s.cfg.DiskReserve
	if avail >= delta {
		return limit, nil
	}
	used, _, err := s.cfg.Store.HistoryBytes(ctx)
	if err != nil {
		return 0, err
	}
	return min(limit, used+avail), nil
}

// reservedWriter reserves ahead of each write into the bucket.
type reservedWriter struct {
	w       io.Writer
	res     *reserver
	written int64
}

func (rw *reservedWriter) Write(p []byte) (int, error) {
	if need := rw.written + int64(len(p)); need > rw.res.reserved {
		ahead := min(max(rw.res.s.cfg.ReserveAhead, rw.res.reserved), maxReserveAhead)
		step := max(need-rw.res.reserved, min(need-rw.res.reserved+ahead, rw.res.limit-rw.res.reserved))
		if err := rw.res.reserve(step); err != nil {
			return 0, err
		}
	}
	n, err := rw.w.Write(p)
	rw.written += int64(n)
	rw.res.s.unwritten.Add(-int64(n))
	return n, err
}

// settle gives back what was reserved and never written, once the
// upload's writes are over.
func (rw *reservedWriter) settle() { rw.res.s.unwritten.Add(-(rw.res.reserved - rw.written)) }

// makeRoom evicts the oldest files old enough to evict (MinEvictAge)
// until need more bytes fit under limit (totalLimit), looking as far
// down the catalog as it must; ErrHistoryFull when none is left to
// evict. Uploads running are never evicted: their own end settles them.
func (s *Service) makeRoom(ctx context.Context, need, limit int64) error {
	for range 1000 { // 100,000 files evicted for one step: something is wrong

		used, _, err := s.cfg.Store.HistoryBytes(ctx)
		if err != nil {
			return err
		}
		if used+need <= limit {
			return nil
		}
		old, err := s.cfg.Store.EvictableHistoryFiles(ctx, s.cfg.Now().Add(-s.cfg.MinEvictAge), 100)
		if err != nil {
			return err
		}
		if len(old) == 0 {
			return fmt.Errorf("%d bytes stored or reserved, %d more asked, %d the most, none old enough to evict: %w", used, need, limit, store.ErrHistoryFull)
		}
		for _, f := range old {
			if used+need <= limit {
				return nil // evict no more than the room needs
			}
			if err := s.delete(ctx, f); err != nil {
				return err
			}
			used -= f.Size
			s.cfg.Log.Info("history file evicted: the server is full", zap.String("id", short(f.ID)), zap.Int64("bytes", f.Size))
			if s.cfg.Metrics.Expired != nil {
				s.cfg.Metrics.Expired(1, f.Size)
			}
		}
	}
	return errors.New("eviction made no room")
}

// delete removes a file's object, then its row.
func (s *Service) delete(ctx context.Context, f store.HistoryFile) error {
	if err := s.cfg.Bucket.Delete(ctx, f.ObjectKey); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("delete history object: %w", err)
	}
	return s.cfg.Store.DeleteHistoryFile(ctx, f.ID)
}

// stallWriter is a download's answer, cut off when the reader stops
// taking it for stall: each write must go through within stall of its
// start (issue 47, finding 5: a download to a reader that stopped reading
// was held open as long as the reader liked).
type stallWriter struct {
	w     io.Writer
	rc    *http.ResponseController
	stall time.Duration
}

func (sw *stallWriter) Write(p []byte) (int, error) {
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.stall)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return 0, err
	}
	return sw.w.Write(p)
}

func (s *Service) download(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	release, code, reason := s.admitDownload(clientAddr(r))
	if release == nil {
		s.refuse(w, code, reason, "too many downloads: retry later")
		return
	}
	defer release()
	missing := func() {
		if s.cfg.Metrics.Refused != nil {
			s.cfg.Metrics.Refused(RefusedNotFound)
		}
		http.Error(w, "no such file (it may have expired)", http.StatusNotFound)
	}
	if !validID(id) {
		missing()
		return
	}
	f, err := s.cfg.Store.GetHistoryFile(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && (f.State != store.HistoryReady || !s.cfg.Now().Before(f.Expires)) {
		missing()
		return
	}
	if err != nil {
		s.fail(w, "read the file", err)
		return
	}
	// A one-time file is claimed before it is served: the count goes up
	// in one statement, so of GETs at once only the first serves it
	// (finding 8: two concurrent GETs each had it whole). A download cut
	// short has still used it.
	oneTime := s.cfg.OneTime && r.Method == http.MethodGet
	if oneTime {
		n, err := s.cfg.Store.CountHistoryDownload(ctx, id)
		if errors.Is(err, store.ErrNotFound) || err == nil && n > 1 {
			missing()
			return
		}
		if err != nil {
			s.fail(w, "read the file", err)
			return
		}
	}
	rd, err := s.cfg.Bucket.NewReader(ctx, f.ObjectKey, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		missing()
		return
	}
	if err != nil {
		s.fail(w, "read the file", err)
		return
	}
	defer rd.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(rd.Size(), 10))
	h.Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	n, err := io.Copy(&stallWriter{w: w, rc: http.NewResponseController(w), stall: s.cfg.Stall}, rd)
	if oneTime {
		// Claimed, so used, whole or not: nobody may fetch it again.
		defer func() {
			if err := s.delete(context.WithoutCancel(ctx), f); err != nil {
				s.cfg.Log.Warn("one-time history file not deleted", zap.String("id", short(id)), zap.Error(err))
			}
		}()
	}
	if err != nil {
		s.cfg.Log.Info("history download cut short", zap.String("id", short(id)), zap.Int64("bytes", n), zap.Error(err))
		return
	}
	if s.cfg.Metrics.Downloaded != nil {
		s.cfg.Metrics.Downloaded(n)
	}
	if oneTime {
		return // counted when claimed
	}
	if _, err := s.cfg.Store.CountHistoryDownload(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.cfg.Log.Warn("history download not counted", zap.String("id", short(id)), zap.Error(err))
	}
}

// Sweep deletes the files expired by now (objects first, then rows) and
// reports the total stored after it. Every replica runs it from the
// expiry worker; a file two replicas reach is deleted once.
func (s *Service) Sweep(ctx context.Context, now time.Time) error {
	var files int
	var bytes int64
	for {
		page, err := s.cfg.Store.HistoryFilesBefore(ctx, now, 100)
		if err != nil {
			return err
		}
		for _, f := range page {
			if err := s.delete(ctx, f); err != nil {
				return err
			}
			files++
			bytes += f.Size
		}
		if len(page) < 100 {
			break
		}
	}
	if files > 0 {
		s.cfg.Log.Info("expired history files deleted", zap.Int("files", files), zap.Int64("bytes", bytes))
		if s.cfg.Metrics.Expired != nil {
			s.cfg.Metrics.Expired(files, bytes)
		}
	}
	if s.cfg.Metrics.Stored != nil {
		if used, n, err := s.cfg.Store.HistoryBytes(ctx); err == nil {
			s.cfg.Metrics.Stored(used, n)
		}
	}
	s.mu.Lock()
	s.pruneLocked(now)
	s.mu.Unlock()
	return nil
}
