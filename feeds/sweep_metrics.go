package feeds

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sweepMetrics are the sweep's and retention's part of Metrics.
type sweepMetrics struct {
	slices        *prometheus.CounterVec
	viewers       prometheus.Counter
	rows          prometheus.Counter
	sliceTime     prometheus.Histogram
	lastPassEnd   prometheus.Gauge
	lastPassLap   prometheus.Gauge
	lastPassRows  prometheus.Gauge
	grownDropped  prometheus.Counter
	vacuumedPages prometheus.Counter
	records       prometheus.Counter
	examined      prometheus.Counter
	tombstones    prometheus.Counter
}

func newSweepMetrics(reg prometheus.Registerer) *sweepMetrics {
	m := &sweepMetrics{
		slices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "slices_total",
			Help: "Sweep slices run, by reason: ingest (the batch wrote feed rows), grown (grown feeds queued), recovery (a full pass is due).",
		}, []string{"reason"}),
		viewers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "viewers_visited_total",
			Help: "Viewers visited by sweep slices.",
		}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "rows_deleted_total",
			Help: "Feed rows deleted by sweep slices (beyond a cap, or in a lane that left the config).",
		}),
		sliceTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "slice_seconds",
			Help:    "Time to run and commit one sweep slice.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		lastPassEnd: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "last_pass_end_timestamp_seconds",
			Help: "When the last full sweep pass ended (unix seconds, 0 before the first).",
		}),
		lastPassLap: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "last_pass_lap_seconds",
			Help: "Duration of the last full sweep pass, from its first slice to the one that wrapped.",
		}),
		lastPassRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "last_pass_rows_deleted",
			Help: "Feed rows deleted by the last full sweep pass.",
		}),
		grownDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "grown_dropped_total",
			Help: "Grown feeds not queued because the grown queue was full; the rolling cursor covers them.",
		}),
		vacuumedPages: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "sweep", Name: "vacuumed_pages_total",
			Help: "Database pages returned to the file system by incremental vacuum.",
		}),
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "retention", Name: "records_retired_total",
			Help: "Target records deleted because no feed holds them and they are older than the retention window.",
		}),
		examined: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "retention", Name: "records_examined_total",
			Help: "Records past the retention window the scan checked (retired or still held by a feed); a full lap checks the held ones again.",
		}),
		tombstones: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "retention", Name: "tombstones_retired_total",
			Help: "Delete tombstones deleted because they are older than the replay window.",
		}),
	}
	for _, r := range []SweepReason{SweepIngest, SweepGrown, SweepRecovery} {
		m.slices.WithLabelValues(string(r))
	}
	reg.MustRegister(m.slices, m.viewers, m.rows, m.sliceTime, m.lastPassEnd, m.lastPassLap,
		m.lastPassRows, m.grownDropped, m.vacuumedPages, m.records, m.examined, m.tombstones)
	return m
}

func (m *Metrics) observeSlice(reason SweepReason, viewers int, rows int64, took time.Duration) {
	if m == nil || m.sweep == nil {
		return
	}
	m.sweep.slices.WithLabelValues(string(reason)).Inc()
	m.sweep.viewers.Add(float64(viewers))
	m.sweep.rows.Add(float64(rows))
	m.sweep.sliceTime.Observe(took.Seconds())
}

func (m *Metrics) observePass(st sweepState) {
	if m == nil || m.sweep == nil || st.lastPassEndUS == 0 {
		return
	}
	m.sweep.lastPassEnd.Set(float64(st.lastPassEndUS) / 1e6)
	m.sweep.lastPassLap.Set(float64(st.lastPassLapUS) / 1e6)
	m.sweep.lastPassRows.Set(float64(st.lastPassRows))
}

func (m *Metrics) observeGrownDropped(n int) {
	if m == nil || m.sweep == nil || n == 0 {
		return
	}
	m.sweep.grownDropped.Add(float64(n))
}

// observeVacuum counts pages a vacuum freed. A count below 0 (other
// processes' commits between its two freelist reads) is nothing to add:
// a counter's Add of it panics.
func (m *Metrics) observeVacuum(pages int64) {
	if m == nil || m.sweep == nil || pages <= 0 {
		return
	}
	m.sweep.vacuumedPages.Add(float64(pages))
}

func (m *Metrics) observeRetention(examined, records, tombstones int64) {
	if m == nil || m.sweep == nil {
		return
	}
	m.sweep.examined.Add(float64(examined))
	m.sweep.records.Add(float64(records))
	m.sweep.tombstones.Add(float64(tombstones))
}
