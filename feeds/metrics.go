package feeds

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what ingest does to the database. A nil *Metrics is a
// valid no-op, so tests need no registry.
type Metrics struct {
	batches      prometheus.Counter
	commitTime   prometheus.Histogram
	changes      *prometheus.CounterVec
	feedRows     *prometheus.CounterVec
	cursorTimeUS prometheus.Gauge
	sweep        *sweepMetrics     // sweep_metrics.go
	cursor       *cursorMetrics    // metrics_cursor.go
	writeWait    *writeWaitMetrics // metrics_write_wait.go
	walRestarts  prometheus.Counter
	writeBusy    prometheus.Counter
	fields       *fieldMetrics       // metrics_fields.go
	recordCache  *recordCacheMetrics // metrics_record_cache.go
	profileDrops *prometheus.CounterVec
}

// NewMetrics registers the ingest metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "ingest", Name: "batches_total",
			Help: "Batches committed, each one transaction with its cursor.",
		}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "appview", Subsystem: "ingest", Name: "batch_seconds",
			Help:    "Time from opening a batch to its commit: its wait for the write lock, its events applied (a catch-up batch is applied as its events are read, for up to 10 s) and the commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 17), // to 32.8 s: a catch-up batch stays open up to 10 s, and a lock wait adds to it
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "ingest", Name: "changes_total",
			Help: "Record changes by outcome: applied, duplicate (replay or stale rev), ignored (no feed uses the collection), out_of_scope (no viewer cares about the account).",
		}, []string{"outcome"}),
		feedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "feed", Name: "rows_total",
			Help: "Feed rows written or removed, by operation: fanout, merge, remove.",
		}, []string{"operation"}),
		cursorTimeUS: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "appview", Subsystem: "ingest", Name: "cursor_timestamp_seconds",
			Help: "Time of the last committed stream cursor (its time_us, as unix seconds).",
		}),
	}
	m.walRestarts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "appview", Subsystem: "database", Name: "wal_restarts_total",
		Help: "RESTART checkpoints run because readers kept the WAL from rewinding (wal.go).",
	})
	m.writeBusy = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "appview", Subsystem: "database", Name: "write_busy_total",
		Help: "Write transactions that could not begin within the busy timeout because another process (an operator command) held the write lock; the ingester retries its batch.",
	})
	m.profileDrops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "appview", Subsystem: "profile", Name: "fields_dropped_total",
		Help: "Profile fields stored empty because the record's value was of the wrong type, over its bound, not UTF-8, or an unusable avatar, by field: displayName, description, avatar.",
	}, []string{"field"})
	for _, d := range profileDropNames {
		m.profileDrops.WithLabelValues(d.label)
	}
	reg.MustRegister(m.batches, m.commitTime, m.changes, m.feedRows, m.cursorTimeUS, m.walRestarts, m.writeBusy, m.profileDrops)
	// Create every series up front. A batch's rows are visible to readers
	// at commit, before observeBatch runs, so a scrape that follows a feed
	// read must still find the series (at zero) rather than a gap.
	for _, outcome := range []string{"applied", "duplicate", "ignored", "out_of_scope"} {
		m.changes.WithLabelValues(outcome)
	}
	for _, op := range []string{"fanout", "merge", "remove"} {
		m.feedRows.WithLabelValues(op)
	}
	m.sweep = newSweepMetrics(reg)
	m.cursor = newCursorMetrics(reg)
	m.writeWait = newWriteWaitMetrics(reg)
	m.fields = newFieldMetrics(reg)
	m.recordCache = newRecordCacheMetrics(reg)
	return m
}

func (m *Metrics) wroteBusy() {
	if m == nil || m.writeBusy == nil {
		return
	}
	m.writeBusy.Inc()
}

func (m *Metrics) walRestarted() {
	if m == nil || m.walRestarts == nil {
		return
	}
	m.walRestarts.Inc()
}

// observeBatch counts a committed batch. ApplyBatch calls it before it
// publishes the batch's cursor, so whoever waits for the cursor finds the
// batch counted.
func (m *Metrics) observeBatch(r BatchResult, took time.Duration) {
	if m == nil {
		return
	}
	m.batches.Inc()
	m.commitTime.Observe(took.Seconds())
	m.changes.WithLabelValues("applied").Add(float64(r.Applied))
	m.changes.WithLabelValues("duplicate").Add(float64(r.Duplicates))
	m.changes.WithLabelValues("ignored").Add(float64(r.Ignored))
	m.changes.WithLabelValues("out_of_scope").Add(float64(r.OutOfScope))
	m.feedRows.WithLabelValues("fanout").Add(float64(r.FanoutRows))
	m.feedRows.WithLabelValues("merge").Add(float64(r.MergedRows))
	m.feedRows.WithLabelValues("remove").Add(float64(r.RemovedRows))
}

// observeCursor shows the committed stream cursor's time.
func (m *Metrics) observeCursor(cursorTimeUS int64) {
	if m == nil || cursorTimeUS <= 0 {
		return
	}
	m.cursorTimeUS.Set(float64(cursorTimeUS) / 1e6)
}

// profileFieldsDropped counts the fields a stored profile left out.
func (m *Metrics) profileFieldsDropped(d ProfileDrops) {
	if m == nil || d == 0 {
		return
	}
	for _, n := range profileDropNames {
		if d&n.drop != 0 {
			m.profileDrops.WithLabelValues(n.label).Inc()
		}
	}
}
