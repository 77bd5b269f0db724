package telemetry

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	cb "github.com/contentbackup/contentbackup/api/contentbackup/v1"
	"github.com/contentbackup/contentbackup/internal/codec"
)

// ServiceMetrics are the services' own figures beside the per-RPC ones:
// what archives moved, and how content decoded (the jobs' are
// JobMetrics). A nil *ServiceMetrics records nothing.
type ServiceMetrics struct {
	archiveBytes    *prometheus.CounterVec
	archiveRecords  *prometheus.CounterVec
	archiveDuration *prometheus.HistogramVec
	decodes         *prometheus.CounterVec
}

// NewServiceMetrics registers the services' metrics with reg; nil when
// reg is.
func NewServiceMetrics(reg prometheus.Registerer) *ServiceMetrics {
	if reg == nil {
		return nil
	}
	m := &ServiceMetrics{
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

// Archive counts one export or import (direction) that moved bytes and
// records, and how long it took.
func (m *ServiceMetrics) Archive(direction string, bytes uint64, groups, messages, consent uint64, took time.Duration, err error) {
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

// Decoded counts one decode outcome. Content types outside the catalogue
// share one label value, so a caller cannot grow the series without end.
func (m *ServiceMetrics) Decoded(resp *cb.DecodeResponse) {
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

// AuthMetrics are the authorizer's counters: calls refused before their
// handler ran, by reason, and credentials verified, by where. Its
// methods are authz.Config's Denied and Proved; a nil *AuthMetrics
// records nothing.
type AuthMetrics struct{ refused, proved *prometheus.CounterVec }

// NewAuthMetrics registers the authorizer's counters with reg; nil when
// reg is.
func NewAuthMetrics(reg prometheus.Registerer) *AuthMetrics {
	if reg == nil {
		return nil
	}
	m := &AuthMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "contentbackup_auth_refusals_total",
			Help: "Calls refused before their handler ran, by reason: unauthenticated, scope, owner, actor or malformed (a request that is not valid protobuf).",
		}, []string{"reason"}),
		proved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "contentbackup_auth_credentials_verified_total",
			Help: "Credentials verified (a JWT's signature, a policy token's digest, a client certificate), by where: tap (a gRPC call's headers), http (the HTTP/JSON door) or call (a call the tap did not see). Each call is verified once.",
		}, []string{"where"}),
	}
	reg.MustRegister(m.refused, m.proved)
	return m
}

// Refused counts a refusal for reason.
func (m *AuthMetrics) Refused(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

// Proved counts a credential verified where.
func (m *AuthMetrics) Proved(where string) {
	if m != nil {
		m.proved.WithLabelValues(where).Inc()
	}
}

// NewStoreUp registers the store's health gauge with reg: 1 while the
// store answers health pings, 0 while it does not. Nil when reg is.
func NewStoreUp(reg prometheus.Registerer) prometheus.Gauge {
	if reg == nil {
		return nil
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "contentbackup_store_up",
		Help: "1 while the store answers health pings, 0 while it does not.",
	})
	reg.MustRegister(g)
	return g
}

// ErrorMetrics count the errors calls ended with, by method and by the
// google.rpc.ErrorInfo reason the caller read (BUDGET_EXCEEDED,
// STORE_UNAVAILABLE, ...): the dashboard's memory-budget refusals and
// the alerts' server faults read it. A nil *ErrorMetrics records nothing.
type ErrorMetrics struct{ errors *prometheus.CounterVec }

// NewErrorMetrics registers the counter with reg; nil when reg is.
func NewErrorMetrics(reg prometheus.Registerer) *ErrorMetrics {
	if reg == nil {
		return nil
	}
	m := &ErrorMetrics{errors: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "contentbackup_call_errors_total",
		Help: "Calls that ended with an error after authorization, by method and by the ErrorInfo reason the caller read.",
	}, []string{"grpc_method", "reason"})}
	reg.MustRegister(m.errors)
	return m
}

// Ended counts a call of method that ended with reason.
func (m *ErrorMetrics) Ended(method, reason string) {
	if m != nil {
		m.errors.WithLabelValues(method, reason).Inc()
	}
}
