package appview

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/atfeeds/appview/feeds"
)

// newRegistry builds the daemon's own registry (never the global one) with
// the Go and process collectors and the build_info gauge.
func newRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "appview", Name: "build_info",
		Help: "Always 1; the labels carry the build's version, commit and Go version.",
	}, []string{"version", "commit", "goversion"})
	info.WithLabelValues(version, BuildCommit(), GoVersion()).Set(1)
	reg.MustRegister(info)
	return reg
}

// registerLag exports how far the committed cursor trails the wall clock:
// the one number that says whether ingest keeps up.
func registerLag(reg prometheus.Registerer, store *feeds.Store, now func() time.Time) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "appview", Subsystem: "ingest", Name: "cursor_lag_seconds",
		Help: "Wall clock minus the time_us of the last committed cursor; 0 before the first commit.",
	}, func() float64 {
		c := store.Cursor()
		if c.TimeUS == 0 {
			return 0
		}
		return now().Sub(time.UnixMicro(c.TimeUS)).Seconds()
	}))
}

// registerBatchInterval exports the wait of the ingest's next live batch:
// batch_interval on a quiet stream, up to max_batch_interval while the
// writer is busy. It is also about how long a new post takes to reach
// feeds.
func registerBatchInterval(reg prometheus.Registerer, in *ingester) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "appview", Subsystem: "ingest", Name: "batch_interval_seconds",
		Help: "How long the next live batch gathers events before it is committed: ingest.batch_interval, stretched up to ingest.max_batch_interval while the writer is busy.",
	}, func() float64 { return in.currentInterval().Seconds() }))
}

// registerBatchCuts counts the catch-up batches cut short for a write a
// request waits on (feeds/writer_wanted.go): how often new viewers and
// notifyOfUpdate cost a catch-up a commit; and of the parts those writes
// stopped, how many stopped at once and how many only after the minimum
// of applying (appview/ingest_stop.go): whether the free stops a second
// cover the requests that come.
func registerBatchCuts(reg prometheus.Registerer, in *ingester) {
	in.cutForWriters = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "appview", Subsystem: "ingest", Name: "batches_cut_total",
		Help: "Catch-up batches committed before their size or time bound because a write a request waits on (a new viewer's registration or first read, notifyOfUpdate) wanted the write lock.",
	})
	stops := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "appview", Subsystem: "ingest", Name: "part_stops_total",
		Help: "Parts of a catch-up's batch stopped for a write a request waits on: at the change in hand (when, at_once; the first five within a second) or once the part had applied for 10 ms (after_minimum).",
	}, []string{"when"})
	in.stopsAtOnce = stops.WithLabelValues("at_once")
	in.stopsAfterMinimum = stops.WithLabelValues("after_minimum")
	reg.MustRegister(in.cutForWriters, stops)
}
