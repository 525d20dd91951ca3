package jetstream

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	collectionOther = "other"
	// collectionNone labels identity and account events, which have no
	// collection.
	collectionNone = "none"
)

// Metrics counts what the client receives. A nil *Metrics is a valid no-op,
// so tests and tools need no registry.
type Metrics struct {
	received   *prometheus.CounterVec
	dropped    *prometheus.CounterVec
	reconnects prometheus.Counter
	stepAways  prometheus.Counter
	idle       prometheus.Counter
	numbering  prometheus.Counter
	dialErrors prometheus.Counter
	connected  prometheus.Gauge
	bytes      prometheus.Counter

	// exact and prefixes map an event's collection to its label: the
	// configured entry it matches, else "other", so the label set stays
	// closed however many collections the firehose carries.
	exact    map[string]struct{}
	prefixes []string // configured "app.bsky.graph.*" entries, without the "*"
}

// NewMetrics registers the jetstream metrics on reg. collections are the
// configured wantedCollections (exact NSIDs or "prefix.*"); they are the
// only values of the collection label besides "other".
func NewMetrics(reg prometheus.Registerer, collections []string) *Metrics {
	const ns, sub = "appview", "jetstream"
	m := &Metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "events_received_total",
			Help: "Events decoded from the firehose, by kind, collection (a configured one, \"other\", or \"none\" for non-commits) and operation (\"none\" for non-commits).",
		}, []string{"kind", "collection", "operation"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "events_dropped_total",
			Help: "Frames dropped as malformed or oversized, by reason.",
		}, []string{"reason"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reconnects_total",
			Help: "Redials after a session ended or a dial failed.",
		}),
		stepAways: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "step_aways_total",
			Help: "Sessions the client closed itself because the consumer's queue stayed full (a long catch-up batch); it redials once there is room.",
		}),
		numbering: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "sequence_resumes_refused_total",
			Help: "Sessions resumed by sequence number whose first event showed the host numbering its events differently (a replaced instance); the client resumed by time instead.",
		}),
		idle: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "idle_timeouts_total",
			Help: "Sessions ended because no event came for jetstream.idle_timeout (a stalled host); the client tries the next URL.",
		}),
		dialErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "dial_errors_total",
			Help: "Websocket dials that failed or were refused.",
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "connected",
			Help: "1 while a firehose connection is open.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "bytes_received_total",
			Help: "Frame payload bytes read from the firehose (after decompression).",
		}),
		exact: make(map[string]struct{}),
	}
	for _, c := range collections {
		if p, ok := strings.CutSuffix(c, "*"); ok {
			m.prefixes = append(m.prefixes, p)
		} else {
			m.exact[c] = struct{}{}
		}
	}
	reg.MustRegister(m.received, m.dropped, m.reconnects, m.stepAways, m.idle, m.numbering, m.dialErrors, m.connected, m.bytes)

	// Create the expected series up front so dashboards see zeros rather
	// than gaps before the first event.
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(r)
	}
	for _, c := range append(slices.Clone(collections), collectionOther) {
		for _, op := range []Operation{OpCreate, OpUpdate, OpDelete} {
			m.received.WithLabelValues(KindCommit.String(), c, op.String())
		}
	}
	for _, k := range []Kind{KindIdentity, KindAccount} {
		m.received.WithLabelValues(k.String(), collectionNone, Operation(0).String())
	}
	return m
}

func (m *Metrics) collectionLabel(nsid string) string {
	if _, ok := m.exact[nsid]; ok {
		return nsid
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(nsid, p) {
			return p + "*"
		}
	}
	return collectionOther
}

func (m *Metrics) eventReceived(ev *Event) {
	if m == nil {
		return
	}
	collection, op := collectionNone, Operation(0)
	if ev.Commit != nil {
		collection, op = m.collectionLabel(string(ev.Commit.Collection)), ev.Commit.Operation
	}
	m.received.WithLabelValues(ev.Kind.String(), collection, op.String()).Inc()
}

func (m *Metrics) frameDropped(reason string) {
	if m == nil {
		return
	}
	m.dropped.WithLabelValues(reason).Inc()
}

func (m *Metrics) reconnect() {
	if m == nil {
		return
	}
	m.reconnects.Inc()
}

func (m *Metrics) steppedAway() {
	if m == nil {
		return
	}
	m.stepAways.Inc()
}

func (m *Metrics) idleTimeout() {
	if m == nil {
		return
	}
	m.idle.Inc()
}

func (m *Metrics) numberingChanged() {
	if m == nil {
		return
	}
	m.numbering.Inc()
}

func (m *Metrics) dialError() {
	if m == nil {
		return
	}
	m.dialErrors.Inc()
}

func (m *Metrics) setConnected(up bool) {
	if m == nil {
		return
	}
	if up {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}

func (m *Metrics) bytesReceived(n int) {
	if m == nil {
		return
	}
	m.bytes.Add(float64(n))
}
