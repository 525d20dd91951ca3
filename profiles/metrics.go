package profiles

import "github.com/prometheus/client_golang/prometheus"

// outcome is how one account's fetch went: a closed set of metric labels.
type outcome string

const (
	outcomeStored          outcome = "stored"           // the profile record was fetched and stored
	outcomeAbsent          outcome = "absent"           // the PDS has no profile record for the account
	outcomeHandleOnly      outcome = "handle_only"      // only the handle was missing, and was verified
	outcomeHandleUnchecked outcome = "handle_unchecked" // only the handle was missing, and could not be checked for now
	outcomeIdentityError   outcome = "identity_error"   // the DID did not resolve
	outcomeIdentityBusy    outcome = "identity_busy"    // not fetched: the directory was paused or had too many lookups in flight
	outcomePDSError        outcome = "pds_error"        // the PDS failed, refused or timed out
	outcomeInvalidRecord   outcome = "invalid_record"   // the PDS sent something that is not a profile
	outcomeQueueFull       outcome = "queue_full"       // not fetched: the queue was full
	outcomeHostPaused      outcome = "host_paused"      // not fetched: the PDS host answered 429 and asked us to wait
	// outcomeParked is no end: the job waits for a slot of its PDS host
	// (Service.parked). Not a metric label.
	outcomeParked outcome = "parked"
)

var outcomes = []outcome{outcomeStored, outcomeAbsent, outcomeHandleOnly, outcomeHandleUnchecked, outcomeIdentityError,
	outcomeIdentityBusy, outcomePDSError, outcomeInvalidRecord, outcomeQueueFull, outcomeHostPaused}

// failed outcomes hold the account back: for RetryAfter, or until its
// host's pause ends (outcomeHostPaused, and the pds_error of the request
// that met the host's 429).
func (o outcome) failed() bool {
	switch o {
	case outcomeHandleUnchecked, outcomeIdentityError, outcomePDSError, outcomeInvalidRecord, outcomeHostPaused:
		return true
	}
	return false
}

// How each profile of a page was answered.
const (
	resultStored  = "stored"  // already stored
	resultFetched = "fetched" // fetched within the read's wait
	resultMissing = "missing" // answered without it (or without its handle)
)

// Metrics count fetches and hydrated profiles. A nil *Metrics is a valid
// no-op.
type Metrics struct {
	fetches *prometheus.CounterVec
	answers *prometheus.CounterVec
}

// NewMetrics registers the profile metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "profiles", Name: "fetches_total",
			Help: "Profile fetches from PDSes by outcome: stored, absent, handle_only, handle_unchecked, identity_error, identity_busy, pds_error, invalid_record, queue_full, host_paused (not sent: the host answered 429 and asked us to wait).",
		}, []string{"outcome"}),
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "profiles", Name: "hydrated_total",
			Help: "Profiles answered for profiles=true, by result: stored (already there), fetched (within the wait), missing (answered without it).",
		}, []string{"result"}),
	}
	for _, o := range outcomes {
		m.fetches.WithLabelValues(string(o))
	}
	for _, r := range []string{resultStored, resultFetched, resultMissing} {
		m.answers.WithLabelValues(r)
	}
	reg.MustRegister(m.fetches, m.answers)
	return m
}

func (m *Metrics) fetched(o outcome) {
	if m != nil {
		m.fetches.WithLabelValues(string(o)).Inc()
	}
}

func (m *Metrics) hydrated(result string) {
	if m != nil {
		m.answers.WithLabelValues(result).Inc()
	}
}
