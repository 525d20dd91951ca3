package feeds

import "github.com/prometheus/client_golang/prometheus"

// cursorMetrics count races on stored cursors: a writer whose expected
// position was overtaken keeps the more advanced one.
type cursorMetrics struct {
	casMismatches *prometheus.CounterVec
}

func newCursorMetrics(reg prometheus.Registerer) *cursorMetrics {
	m := &cursorMetrics{
		casMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "cursor", Name: "cas_mismatches_total",
			Help: "Cursor writes that found the stored position already ahead, by cursor kind.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.casMismatches)
	return m
}

func (m *Metrics) casMismatch(kind string) {
	if m == nil || m.cursor == nil {
		return
	}
	m.cursor.casMismatches.WithLabelValues(kind).Inc()
}
