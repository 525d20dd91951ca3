package feeds

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// writeWaitMetrics time how long the process's writes other than the
// ingester's wait for the write lock (lockWriter). A catch-up's batch
// holds the lock for up to ten seconds; a write a request waits on cuts it
// short (writer_wanted.go). This is how an operator sees what that costs
// the requests on a running daemon, as appview-bench's -write-probe shows
// it in a benchmark.
type writeWaitMetrics struct {
	wait *prometheus.HistogramVec
}

// The writer label's values: a write a request waits on (Urgent), or one
// no request waits on.
const (
	writerRequest    = "request"
	writerBackground = "background"
)

func newWriteWaitMetrics(reg prometheus.Registerer) *writeWaitMetrics {
	m := &writeWaitMetrics{
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "appview", Subsystem: "database", Name: "write_lock_wait_seconds",
			Help: "How long a write transaction other than the ingester's waited for the daemon's write lock, by writer: request (a new viewer's registration, its first read, notifyOfUpdate: a catch-up's batch commits early for them) or background (followee backfills, profiles, last reads).",
			// 100 µs to about 26 s: an idle lock, a live batch, a
			// catch-up's part, a whole catch-up batch.
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 19),
		}, []string{"writer"}),
	}
	reg.MustRegister(m.wait)
	m.wait.WithLabelValues(writerRequest)
	m.wait.WithLabelValues(writerBackground)
	return m
}

func (m *Metrics) observeWriteWait(urgent bool, waited time.Duration) {
	if m == nil || m.writeWait == nil {
		return
	}
	writer := writerBackground
	if urgent {
		writer = writerRequest
	}
	m.writeWait.wait.WithLabelValues(writer).Observe(waited.Seconds())
}
