package history

import (
	"context"
	"time"

	"go.uber.org/zap"
)

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
