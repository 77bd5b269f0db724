package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/contentbackup/contentbackup/internal/auth"
	"github.com/contentbackup/contentbackup/internal/expiry"
	"github.com/contentbackup/contentbackup/internal/history"
)

// HistoryMetrics registers the history server's figures with reg.
func HistoryMetrics(reg prometheus.Registerer) history.Metrics {
	if reg == nil {
		return history.Metrics{}
	}
	uploads := prometheus.NewCounter(prometheus.CounterOpts{Name: "contentbackup_history_uploads_total", Help: "History files uploaded whole."})
	uploadBytes := prometheus.NewCounter(prometheus.CounterOpts{Name: "contentbackup_history_upload_bytes_total", Help: "Bytes of the history files uploaded whole."})
	downloads := prometheus.NewCounter(prometheus.CounterOpts{Name: "contentbackup_history_downloads_total", Help: "History files downloaded whole."})
	downloadBytes := prometheus.NewCounter(prometheus.CounterOpts{Name: "contentbackup_history_download_bytes_total", Help: "Bytes of the history files downloaded whole."})
	expired := prometheus.NewCounter(prometheus.CounterOpts{Name: "contentbackup_history_expired_files_total", Help: "History files deleted past their retention, or evicted when the total was full."})
	reg.MustRegister(uploads, uploadBytes, downloads, downloadBytes, expired)
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "contentbackup_history_refusals_total",
		Help: "History requests refused, by reason: too_large (413), rate and client_concurrency (429), busy (503), full (507), stalled (408), not_found (404).",
	}, []string{"reason"})
	stored := prometheus.NewGauge(prometheus.GaugeOpts{Name: "contentbackup_history_stored_bytes", Help: "Bytes every history file holds, after the last sweep."})
	files := prometheus.NewGauge(prometheus.GaugeOpts{Name: "contentbackup_history_files", Help: "History files stored, after the last sweep."})
	limit := prometheus.NewGauge(prometheus.GaugeOpts{Name: "contentbackup_history_max_total_bytes", Help: "--history-max-total: the alert rules read the stored bytes against it."})
	reg.MustRegister(refused, stored, files, limit)
	for _, r := range []string{history.RefusedTooLarge, history.RefusedRate, history.RefusedClient, history.RefusedBusy, history.RefusedFull, history.RefusedStalled, history.RefusedNotFound} {
		refused.WithLabelValues(r)
	}
	return history.Metrics{
		Uploaded:   func(n int64) { uploads.Inc(); uploadBytes.Add(float64(n)) },
		Downloaded: func(n int64) { downloads.Inc(); downloadBytes.Add(float64(n)) },
		Expired:    func(n int, _ int64) { expired.Add(float64(n)) },
		Refused:    func(reason string) { refused.WithLabelValues(reason).Inc() },
		Stored:     func(bytes, n int64) { stored.Set(float64(bytes)); files.Set(float64(n)) },
		MaxTotal:   func(n int64) { limit.Set(float64(n)) },
	}
}

// RegisterPolicyMetrics exports the policy file's loads, so a refused
// reload (a revocation that did not take effect) alerts rather than only
// logs.
func RegisterPolicyMetrics(reg prometheus.Registerer, policy *auth.PolicySource) {
	if policy == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "contentbackup_auth_policy_loaded_timestamp_seconds",
			Help: "When the auth policy in force was loaded (unix seconds).",
		}, func() float64 { return float64(policy.Status().LoadedAt.UnixNano()) / 1e9 }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "contentbackup_auth_policy_reload_failures_total",
			Help: "Auth policy reloads refused (the file did not parse or validate; the previous policy stayed in force).",
		}, func() float64 { return float64(policy.Status().Failures) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "contentbackup_auth_policy_stale",
			Help: "1 when the latest reload of the auth policy file was refused, so the file on disk is not in force.",
		}, func() float64 {
			if policy.Status().Failing != "" {
				return 1
			}
			return 0
		}),
	)
}

// InstrumentExpiry sets cfg's hooks to count what the expiry purge
// deletes and how far behind it is, on reg (nothing when reg is nil).
func InstrumentExpiry(reg prometheus.Registerer, cfg *expiry.Config) {
	if reg == nil {
		return
	}
	purged := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "contentbackup_expired_messages_purged_total",
		Help: "Messages deleted from the store because their expires_at_ns had passed (META-051).",
	})
	lag := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "contentbackup_expired_messages_lag_seconds",
		Help: "How long the oldest expired message still stored is past its deadline, after the last purge run (0: none is).",
	})
	reg.MustRegister(purged, lag)
	cfg.Purged = func(n int64) { purged.Add(float64(n)) }
	cfg.Lag = func(d time.Duration) { lag.Set(d.Seconds()) }
}
