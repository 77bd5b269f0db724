package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/contentbackup/contentbackup/internal/fault"
	"github.com/contentbackup/contentbackup/internal/store"
)

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
