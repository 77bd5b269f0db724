package telemetry

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/contentbackup/contentbackup/internal/store"
	"github.com/contentbackup/contentbackup/internal/store/postgres"
	"github.com/contentbackup/contentbackup/internal/store/sqlite"
)

// RegisterStoreMetrics exports the engine's connection statistics: the
// pgx pool's for Postgres, and for the embedded store its single writer's
// (how often and how long writes waited for it), as database/sql reports
// them.
func RegisterStoreMetrics(reg prometheus.Registerer, st store.Store) {
	switch s := st.(type) {
	case *postgres.Store:
		reg.MustRegister(pgxPoolCollector{pool: s.Pool()})
	case *sqlite.Store:
		reg.MustRegister(collectors.NewDBStatsCollector(s.DB(), "sqlite_writer"))
	}
}

// pgxPoolCollector reads pgxpool's own statistics at each scrape.
type pgxPoolCollector struct{ pool *pgxpool.Pool }

var (
	pgxAcquired      = prometheus.NewDesc("contentbackup_pgxpool_acquired_conns", "Connections in use.", nil, nil)
	pgxIdle          = prometheus.NewDesc("contentbackup_pgxpool_idle_conns", "Idle connections.", nil, nil)
	pgxTotal         = prometheus.NewDesc("contentbackup_pgxpool_total_conns", "Open connections.", nil, nil)
	pgxMax           = prometheus.NewDesc("contentbackup_pgxpool_max_conns", "The pool's size.", nil, nil)
	pgxAcquires      = prometheus.NewDesc("contentbackup_pgxpool_acquires_total", "Connections acquired.", nil, nil)
	pgxEmptyAcquires = prometheus.NewDesc("contentbackup_pgxpool_empty_acquires_total", "Acquires that waited because no connection was idle.", nil, nil)
	pgxAcquireWait   = prometheus.NewDesc("contentbackup_pgxpool_acquire_wait_seconds_total", "Time spent acquiring connections.", nil, nil)
	pgxCanceled      = prometheus.NewDesc("contentbackup_pgxpool_canceled_acquires_total", "Acquires cancelled by their caller's context.", nil, nil)
)

func (pgxPoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pgxAcquired, pgxIdle, pgxTotal, pgxMax, pgxAcquires, pgxEmptyAcquires, pgxAcquireWait, pgxCanceled} {
		ch <- d
	}
}

func (c pgxPoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(pgxAcquired, prometheus.GaugeValue, float64(s.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(pgxIdle, prometheus.GaugeValue, float64(s.IdleConns()))
	ch <- prometheus.MustNewConstMetric(pgxTotal, prometheus.GaugeValue, float64(s.TotalConns()))
	ch <- prometheus.MustNewConstMetric(pgxMax, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(pgxAcquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(pgxEmptyAcquires, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(pgxAcquireWait, prometheus.CounterValue, s.AcquireDuration().Seconds())
	ch <- prometheus.MustNewConstMetric(pgxCanceled, prometheus.CounterValue, float64(s.CanceledAcquireCount()))
}
