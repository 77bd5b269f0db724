package server

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// domainMetrics are the service's own figures beside the per-RPC ones:
// what archives moved, and how content decoded (the jobs' are
// telemetry.JobMetrics). A nil *domainMetrics
// records nothing.
type domainMetrics struct {
	archiveBytes    *prometheus.CounterVec
	archiveRecords  *prometheus.CounterVec
	archiveDuration *prometheus.HistogramVec
	decodes         *prometheus.CounterVec
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
	reg.MustRegister(m.archiveBytes, m.archiveRecords, m.archiveDuration, m.decodes)
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
