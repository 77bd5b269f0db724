package history

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
	"gocloud.dev/gcerrors"

	"github.com/contentbackup/contentbackup/internal/store"
)

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

// servable is id's file if a download may serve it: ready and not
// expired, and, for a one-time file, claimed by this download. ok is
// false when there is no such file to serve (404); err, when the store
// failed.
func (s *Service) servable(ctx context.Context, id string, oneTime bool) (f store.HistoryFile, ok bool, err error) {
	if !validID(id) {
		return f, false, nil
	}
	f, err = s.cfg.Store.GetHistoryFile(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && (f.State != store.HistoryReady || !s.cfg.Now().Before(f.Expires)) {
		return f, false, nil
	}
	if err != nil {
		return f, false, err
	}
	// A one-time file is claimed before it is served: the count goes up
	// in one statement, so of GETs at once only the first serves it
	// (finding 8: two concurrent GETs each had it whole). A download cut
	// short has still used it.
	if oneTime {
		n, err := s.cfg.Store.CountHistoryDownload(ctx, id)
		if errors.Is(err, store.ErrNotFound) || err == nil && n > 1 {
			return f, false, nil
		}
		if err != nil {
			return f, false, err
		}
	}
	return f, true, nil
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
	oneTime := s.cfg.OneTime && r.Method == http.MethodGet
	f, ok, err := s.servable(ctx, id, oneTime)
	if err != nil {
		s.fail(w, "read the file", err)
		return
	}
	if !ok {
		missing()
		return
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
