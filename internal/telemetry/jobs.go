package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/contentbackup/contentbackup/internal/jobs"
)

// JobMetrics are the backup jobs' figures: jobs run and taken over,
// schedule runs and missed ticks, and the freshness the alert rules in
// deploy/prometheus read. A nil *JobMetrics records nothing.
type JobMetrics struct {
	jobs           *prometheus.HistogramVec
	jobBytes       *prometheus.CounterVec
	scheduleRuns   *prometheus.CounterVec
	scheduleMissed *prometheus.CounterVec
	takenOver      *prometheus.CounterVec
	verified       *prometheus.CounterVec
	lastSuccess    *prometheus.GaugeVec
	lastVerified   *prometheus.GaugeVec
	retentionRuns  *prometheus.CounterVec
	retentionLast  *prometheus.GaugeVec
	interval       *prometheus.GaugeVec
	blocked        *prometheus.GaugeVec
	keyRows        *prometheus.GaugeVec
	reg            prometheus.Registerer
}

// NewJobMetrics registers the jobs' metrics with reg; nil when reg is.
func NewJobMetrics(reg prometheus.Registerer) *JobMetrics {
	if reg == nil {
		return nil
	}
	m := &JobMetrics{reg: reg}
	m.jobs = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "contentbackup_jobs_duration_seconds",
		Help:    "Backup jobs this server ran to their end, by kind (export, import) and state (succeeded, failed, cancelled): how long each ran.",
		Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
	}, []string{"kind", "state"})
	m.jobBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "contentbackup_jobs_archive_bytes_total",
		Help: "Archive bytes backup jobs wrote (export) or read (import).",
	}, []string{"kind"})
	m.scheduleRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "contentbackup_schedule_runs_total",
		Help: "Scheduled exports by schedule and outcome: started, queued (waited for a slot: late), skipped (the owner's export still running, its queue full, or the tick not claimable), claimed_elsewhere (another replica runs the tick) or erased (the owner was erased and its name not re-enabled: archivectl owners reenable).",
	}, []string{"schedule", "outcome"})
	m.scheduleMissed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "contentbackup_schedule_missed_ticks_total",
		Help: "Schedule ticks no replica ran (all down, or the store unreachable), counted per owner when the next tick is claimed.",
	}, []string{"schedule"})
	m.takenOver = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "contentbackup_jobs_taken_over_total",
		Help: "Backup jobs this server took over, by kind, because the server running them stopped (their lease ran out): each runs again as its next attempt.",
	}, []string{"kind"})
	m.verified = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "contentbackup_backup_verifications_total",
		Help: "Backups read back by their schedule's verification, by schedule and outcome (ok, damaged: a record failed to authenticate, or the object's length, SHA-256 or counts differ from the catalog, or it is gone).",
	}, []string{"schedule", "outcome"})
	m.lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "contentbackup_backup_last_success_timestamp_seconds",
		Help: "When the newest complete backup of an owner by a schedule completed (Unix seconds), as this replica knows it: from the catalog at start, then from the exports it runs. Alert on the max across replicas.",
	}, []string{"schedule", "owner"})
	m.lastVerified = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "contentbackup_backup_last_verified_timestamp_seconds",
		Help: "When this replica last read back a backup of an owner by a schedule (Unix seconds), sound or not.",
	}, []string{"schedule", "owner"})
	m.retentionRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "contentbackup_retention_runs_total",
		Help: "Retention runs after a scheduled export, by schedule and outcome (ok, error).",
	}, []string{"schedule", "outcome"})
	m.retentionLast = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "contentbackup_retention_last_success_timestamp_seconds",
		Help: "When a schedule's retention last ran without error on this replica (Unix seconds).",
	}, []string{"schedule"})
	m.keyRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "contentbackup_key_rows",
		Help: "Key rows of the catalog by the state of the key-encryption key that wraps them (current, retiring, unavailable) and kind (owner_key; legacy_backup: a data key the KEK wraps directly, before owner keys). Anything but current is a rotation or migration the key worker has not finished.",
	}, []string{"kek_state", "kind"})
	m.interval = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "contentbackup_schedule_interval_seconds",
		Help: "How long a schedule waits between ticks; the alert rules measure staleness in it.",
	}, []string{"schedule"})
	m.blocked = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "contentbackup_export_blocked",
		Help: "1 while an owner's last export (by schedule; \"\" on demand) was stopped by a stored record the export rules refuse, until one completes: every backup of the owner fails the same way until the record is excluded or repaired (archivectl lint, --nonconforming).",
	}, []string{"schedule", "owner"})
	reg.MustRegister(m.jobs, m.jobBytes, m.scheduleRuns, m.scheduleMissed, m.takenOver, m.verified,
		m.lastSuccess, m.lastVerified, m.retentionRuns, m.retentionLast, m.interval, m.blocked, m.keyRows)
	return m
}

// KeyStatus records the key worker's last count of the catalog's key
// rows.
func (m *JobMetrics) KeyStatus(st jobs.KeyStatus) {
	if m == nil {
		return
	}
	for _, state := range []string{"current", "retiring", "unavailable"} {
		var owners, legacy int64
		uncounted := false
		for _, u := range st.KEKs {
			if u.State == state {
				owners, legacy = owners+u.OwnerKeys, legacy+u.LegacyBackups
				uncounted = uncounted || u.OwnerKeysUncounted
			}
		}
		// The key worker does not count the current KEK's owner keys
		// (every owner's, on a timer): no series rather than a wrong one.
		if uncounted {
			m.keyRows.DeleteLabelValues(state, "owner_key")
		} else {
			m.keyRows.WithLabelValues(state, "owner_key").Set(float64(owners))
		}
		m.keyRows.WithLabelValues(state, "legacy_backup").Set(float64(legacy))
	}
}

// Instrument sets cfg's hooks to record into m.
func (m *JobMetrics) Instrument(cfg *jobs.Config) {
	if m == nil {
		return
	}
	cfg.Ended = func(kind, state string, bytes uint64, took time.Duration) {
		m.jobs.WithLabelValues(kind, state).Observe(took.Seconds())
		m.jobBytes.WithLabelValues(kind).Add(float64(bytes))
	}
	cfg.ScheduleRun = func(schedule, outcome string) { m.scheduleRuns.WithLabelValues(schedule, outcome).Inc() }
	cfg.ScheduleMissed = func(schedule string, ticks int) { m.scheduleMissed.WithLabelValues(schedule).Add(float64(ticks)) }
	cfg.TakenOver = func(kind string) { m.takenOver.WithLabelValues(kind).Inc() }
	cfg.Freshness = jobs.Freshness{
		// The series that name an erased owner go with it (issue 46,
		// finding 11): on this replica; another's go when it restarts.
		OwnerErased: func(owner string) {
			for _, v := range []*prometheus.GaugeVec{m.lastSuccess, m.lastVerified, m.blocked} {
				v.DeletePartialMatch(prometheus.Labels{"owner": owner})
			}
		},
		BackupSucceeded: func(schedule, owner string, at time.Time) {
			m.lastSuccess.WithLabelValues(schedule, owner).Set(unixSeconds(at))
		},
		BackupVerified: func(schedule, owner string, at time.Time, ok bool) {
			outcome := "ok"
			if !ok {
				outcome = "damaged"
			}
			m.verified.WithLabelValues(schedule, outcome).Inc()
			m.lastVerified.WithLabelValues(schedule, owner).Set(unixSeconds(at))
		},
		RetentionRan: func(schedule string, at time.Time, err error) {
			if err != nil {
				m.retentionRuns.WithLabelValues(schedule, "error").Inc()
				return
			}
			m.retentionRuns.WithLabelValues(schedule, "ok").Inc()
			m.retentionLast.WithLabelValues(schedule).Set(unixSeconds(at))
		},
		ScheduleInterval: func(schedule string, every time.Duration) {
			m.interval.WithLabelValues(schedule).Set(every.Seconds())
		},
		ExportBlocked: func(schedule, owner string, blocked bool) {
			if blocked {
				m.blocked.WithLabelValues(schedule, owner).Set(1)
				return
			}
			m.blocked.DeleteLabelValues(schedule, owner)
		},
	}
}

// Watch exports how many jobs jm runs and how many wait for a slot.
func (m *JobMetrics) Watch(jm *jobs.Manager) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "contentbackup_jobs_running",
		Help: "Backup jobs this server is running.",
	}, func() float64 { return float64(jm.Runner.Running()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "contentbackup_jobs_queued",
		Help: "Backup jobs waiting on this server for a slot.",
	}, func() float64 { return float64(jm.Runner.Queued()) }))
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
