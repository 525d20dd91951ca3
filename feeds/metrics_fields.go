package feeds

import "github.com/prometheus/client_golang/prometheus"

// fieldMetrics say what filters cost and whether declared fields are
// complete: rows a filtered page examined, and fields whose stored records
// are still being extracted (until then filtered pages can miss records).
type fieldMetrics struct {
	examined prometheus.Histogram
	backlog  prometheus.Gauge
}

func newFieldMetrics(reg prometheus.Registerer) *fieldMetrics {
	m := &fieldMetrics{
		examined: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "appview", Subsystem: "feed", Name: "filter_rows_examined",
			Help:    "Feed rows one filtered page examined; the scan stops at the page's limit of matches or its bound (5000).",
			Buckets: []float64{10, 50, 100, 250, 500, 1000, 2500, 5000},
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "appview", Subsystem: "feed", Name: "field_backlog_fields",
			Help: "Declared fields whose values are still being extracted from records stored before they were declared.",
		}),
	}
	reg.MustRegister(m.examined, m.backlog)
	return m
}

func (m *Metrics) observeFilterScan(rows int) {
	if m == nil || m.fields == nil {
		return
	}
	m.fields.examined.Observe(float64(rows))
}

func (m *Metrics) setFieldBacklog(n int) {
	if m == nil || m.fields == nil {
		return
	}
	m.fields.backlog.Set(float64(n))
}
