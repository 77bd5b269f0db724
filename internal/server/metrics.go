package server

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/codec"
	"github.com/contentbackup/contentbackup/internal/jobs"
)

// domainMetrics are the service's own figures beside the per-RPC ones:
// what archives moved, and how content decoded. A nil *domainMetrics
// records nothing.
type domainMetrics struct {
	archiveBytes    *prometheus.CounterVec
	archiveRecords  *prometheus.CounterVec
	archiveDuration *prometheus.HistogramVec
	decodes         *prometheus.CounterVec
	jobs            *prometheus.HistogramVec
	jobBytes        *prometheus.CounterVec
	scheduleRuns    *prometheus.CounterVec
	scheduleMissed  *prometheus.CounterVec
	takenOver       *prometheus.CounterVec
	verified        *prometheus.CounterVec
	lastSuccess     *prometheus.GaugeVec
	lastVerified    *prometheus.GaugeVec
	retentionRuns   *prometheus.CounterVec
	retentionLast   *prometheus.GaugeVec
	interval        *prometheus.GaugeVec
}

func newDomainMetrics(reg prometheus.Registerer) *domainMetrics {
	if reg == nil {
		return nil
	}
	m := &domainMetrics{
		archiveBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "contentbackup_archive_bytes_total",
			Help: "Archive bytes sent by Export and received by Import.",
		}, []string{"direction"}),
		archiveRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "contentbackup_archive_records_total",
			Help: "Records written by Export and applied by Import, by kind (group, message, consent).",
		}, []string{"direction", "kind"}),
		archiveDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "contentbackup_archive_duration_seconds",
			Help:    "How long exports and imports took, by outcome (ok or error).",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10), // 10 ms to ~45 min
		}, []string{"direction", "outcome"}),
		decodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "contentbackup_decode_outcomes_total",
			Help: "Content decoded by Decode, DecodeBatch and ListMessages, by content type (catalogue types by name, every other as \"other\") and outcome (decoded, no_matching_codec, decode_failed, malformed_envelope).",
		}, []string{"content_type", "outcome"}),
	}
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
		Help: "Scheduled exports by schedule and outcome: started, queued (waited for a slot: late), skipped (the owner's export still running, its queue full, or the tick not claimable) or claimed_elsewhere (another replica runs the tick).",
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
	m.interval = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "contentbackup_schedule_interval_seconds",
		Help: "How long a schedule waits between ticks; the alert rules measure staleness in it.",
	}, []string{"schedule"})
	reg.MustRegister(m.archiveBytes, m.archiveRecords, m.archiveDuration, m.decodes, m.jobs, m.jobBytes, m.scheduleRuns, m.scheduleMissed,
		m.takenOver, m.verified, m.lastSuccess, m.lastVerified, m.retentionRuns, m.retentionLast, m.interval)
	return m
}

func (m *domainMetrics) archive(direction string, bytes uint64, groups, messages, consent uint64, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.archiveBytes.WithLabelValues(direction).Add(float64(bytes))
	m.archiveRecords.WithLabelValues(direction, "group").Add(float64(groups))
	m.archiveRecords.WithLabelValues(direction, "message").Add(float64(messages))
	m.archiveRecords.WithLabelValues(direction, "consent").Add(float64(consent))
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.archiveDuration.WithLabelValues(direction, outcome).Observe(took.Seconds())
}

// scheduleRun counts one owner's run of a schedule tick by outcome:
// started, queued (late: it waits for a slot) or skipped.
func (m *domainMetrics) scheduleRun(schedule, outcome string) {
	if m == nil {
		return
	}
	m.scheduleRuns.WithLabelValues(schedule, outcome).Inc()
}

// scheduleMissedTicks counts ticks of a schedule no replica ran.
func (m *domainMetrics) scheduleMissedTicks(schedule string, ticks int) {
	if m == nil {
		return
	}
	m.scheduleMissed.WithLabelValues(schedule).Add(float64(ticks))
}

// freshness is what the alert rules in deploy/prometheus read; with no
// registry it hears nothing.
func (m *domainMetrics) freshness() jobs.Freshness {
	if m == nil {
		return jobs.Freshness{}
	}
	return jobs.Freshness{
		BackupSucceeded: func(schedule, owner string, at time.Time) {
			m.lastSuccess.WithLabelValues(schedule, owner).Set(float64(at.UnixNano()) / 1e9)
		},
		BackupVerified: func(schedule, owner string, at time.Time, ok bool) {
			outcome := "ok"
			if !ok {
				outcome = "damaged"
			}
			m.verified.WithLabelValues(schedule, outcome).Inc()
			m.lastVerified.WithLabelValues(schedule, owner).Set(float64(at.UnixNano()) / 1e9)
		},
		RetentionRan: func(schedule string, at time.Time, err error) {
			if err != nil {
				m.retentionRuns.WithLabelValues(schedule, "error").Inc()
				return
			}
			m.retentionRuns.WithLabelValues(schedule, "ok").Inc()
			m.retentionLast.WithLabelValues(schedule).Set(float64(at.UnixNano()) / 1e9)
		},
		ScheduleInterval: func(schedule string, every time.Duration) {
			m.interval.WithLabelValues(schedule).Set(every.Seconds())
		},
	}
}

// jobTakenOver counts a job this server took over.
func (m *domainMetrics) jobTakenOver(kind string) {
	if m == nil {
		return
	}
	m.takenOver.WithLabelValues(kind).Inc()
}

// jobEnded records a job this server ran to its end.
func (m *domainMetrics) jobEnded(kind, state string, bytes uint64, took time.Duration) {
	if m == nil {
		return
	}
	m.jobs.WithLabelValues(kind, state).Observe(took.Seconds())
	m.jobBytes.WithLabelValues(kind).Add(float64(bytes))
}

// catalogueTypes are the catalogue's types as "authority/type:major".
var catalogueTypes = func() map[string]bool {
	m := map[string]bool{}
	for _, e := range codec.Entries() {
		m[e.Type.Authority+"/"+e.Type.Type+":"+strconv.FormatUint(uint64(e.Type.Major), 10)] = true
	}
	return m
}()

// decoded counts one decode outcome. Content types outside the catalogue
// share one label value, so a caller cannot grow the series without end.
func (m *domainMetrics) decoded(resp *cb.DecodeResponse) {
	if m == nil || resp == nil {
		return
	}
	typ := "other"
	ct := resp.GetContentType() // authority/type:major.minor
	if i := strings.LastIndexByte(ct, '.'); i > 0 && catalogueTypes[ct[:i]] {
		typ = ct[:i]
	}
	outcome := "decoded"
	if u := resp.GetUndecoded(); u != nil {
		switch u.GetKind() {
		case cb.UndecodedKind_UNDECODED_KIND_NO_MATCHING_CODEC:
			outcome = "no_matching_codec"
		case cb.UndecodedKind_UNDECODED_KIND_MALFORMED_ENVELOPE:
			outcome = "malformed_envelope"
		default:
			outcome = "decode_failed"
		}
	}
	m.decodes.WithLabelValues(typ, outcome).Inc()
}
