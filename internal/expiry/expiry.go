// Package expiry deletes disappearing messages from the store once their
// deadline has passed (META-051): a bounded background worker over the
// store's Expiry methods, fair across owners. Listing and export already
// leave out a message from its deadline on (store.MessageQuery.LiveAtNs);
// the purge makes the store forget it too.
package expiry

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/contentbackup/contentbackup/internal/store"
)

// Config bounds the worker.
type Config struct {
	Store store.Expiry
	// Interval is how often a run starts (default 1 min).
	Interval time.Duration
	// Owners is how many owners one store call reaches (default 100), and
	// PerOwner how many messages of each it deletes (default 1,000), in
	// one transaction per owner.
	Owners, PerOwner int
	// MaxPerRun bounds the messages one run deletes (default 100,000); a
	// run that reaches it leaves the rest to the next, continuing after
	// the last owner it reached.
	MaxPerRun int64
	Log       *zap.Logger
	// Purged, when set, is told how many messages each run deleted, and
	// Lag how long the oldest expired message still stored is past its
	// deadline after the run (zero when none is).
	Purged func(n int64)
	Lag    func(d time.Duration)
	// Sweeps are other deadlines the worker enforces each run, after the
	// messages: the history server's expired files.
	Sweeps []func(ctx context.Context, now time.Time) error
}

// Worker purges expired messages, a bounded run each interval.
type Worker struct {
	cfg   Config
	after string // the last owner the previous run reached
}

// New returns a worker; Run runs it.
func New(cfg Config) *Worker {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Owners <= 0 {
		cfg.Owners = 100
	}
	if cfg.PerOwner <= 0 {
		cfg.PerOwner = 1000
	}
	if cfg.MaxPerRun <= 0 {
		cfg.MaxPerRun = 100_000
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &Worker{cfg: cfg}
}

// Run purges every Interval, the first time at once, until ctx is done.
func (w *Worker) Run(ctx context.Context) {
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	for {
		now := time.Now()
		if _, err := w.RunOnce(ctx, now); err != nil && ctx.Err() == nil {
			w.cfg.Log.Warn("purge expired messages", zap.Error(err))
		}
		for _, sweep := range w.cfg.Sweeps {
			if err := sweep(ctx, now); err != nil && ctx.Err() == nil {
				w.cfg.Log.Warn("sweep expired files", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// RunOnce deletes the messages expired by now, MaxPerRun at most, owner
// after owner from where the last run stopped, and returns how many.
func (w *Worker) RunOnce(ctx context.Context, now time.Time) (int64, error) {
	var total, pass int64
	for total < w.cfg.MaxPerRun {
		n, last, err := w.cfg.Store.PurgeExpired(ctx, now, w.after, w.cfg.Owners, min(w.cfg.PerOwner, int(w.cfg.MaxPerRun-total)))
		total, pass = total+n, pass+n
		if err != nil {
			w.report(ctx, now, total)
			return total, err
		}
		w.after = last
		if last == "" {
			// The last owner reached: a pass that deleted nothing leaves
			// nothing expired (as of now); otherwise go round again.
			if pass == 0 {
				break
			}
			pass = 0
		}
	}
	w.report(ctx, now, total)
	return total, nil
}

func (w *Worker) report(ctx context.Context, now time.Time, purged int64) {
	if purged > 0 {
		w.cfg.Log.Info("expired messages purged", zap.Int64("count", purged))
	}
	if w.cfg.Purged != nil {
		w.cfg.Purged(purged)
	}
	if w.cfg.Lag == nil {
		return
	}
	oldest, err := w.cfg.Store.OldestExpired(ctx, now)
	if err != nil {
		w.cfg.Log.Warn("expired messages' lag", zap.Error(err))
		return
	}
	lag := time.Duration(0)
	if !oldest.IsZero() {
		lag = now.Sub(oldest)
	}
	w.cfg.Lag(lag)
}
