package backfill

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count first reads, backfill runs and PDS requests. A nil
// *Metrics is a valid no-op.
type Metrics struct {
	firstReads    *prometheus.CounterVec
	firstReadTime prometheus.Histogram
	waitedOut     prometheus.Counter
	runs          *prometheus.CounterVec
	runTime       *prometheus.HistogramVec
	pdsRequests   *prometheus.CounterVec
	queue         prometheus.Gauge
	dropped       prometheus.Counter
	rejections    *prometheus.CounterVec
	droppedRecs   *prometheus.CounterVec
	overLimitRecs *prometheus.CounterVec
	longCursors   prometheus.Counter
	circles       *prometheus.CounterVec
	unlisted      prometheus.Counter
	restored      prometheus.Counter
	edited        prometheus.Counter
	lastReadCount *prometheus.CounterVec
}

// listingKinds are the kind label's values: a viewer's follows, or a
// followed account's target records.
var listingKinds = []string{"follows", "targets"}

// NewMetrics registers the backfill metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "appview"
	m := &Metrics{
		firstReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "first_read", Name: "runs_total",
			Help: "First-read runs by outcome: complete, failed, timed_out, deferred (what it needs is not due yet), claimed_elsewhere, claim_lost (a gap released its claim: run again at the next read), feeds_changed (an operator command's run refused: the daemon's feeds changed while it ran).",
		}, []string{"outcome"}),
		firstReadTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: "first_read", Name: "duration_seconds",
			Help:    "Time from claim to a built (or failed) feed.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}),
		waitedOut: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "first_read", Name: "waited_out_total",
			Help: "getFeed requests that stopped waiting for a first read at first_read_wait.",
		}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "backfill", Name: "runs_total",
			Help: "Listing runs by kind (follows, targets) and outcome (ok, error, gone, cut_off: ended by its time limit or a shutdown, to resume from its last committed page).",
		}, []string{"kind", "outcome"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: "backfill", Name: "run_duration_seconds",
			Help:    "Duration of one listing run.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"kind"}),
		pdsRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "backfill", Name: "pds_requests_total",
			Help: "PDS listRecords requests by outcome (ok or the failure kind; host_paused: not sent, the host asked us to wait).",
		}, []string{"outcome"}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "backfill", Name: "queue_depth",
			Help: "Followee backfills waiting to run.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "backfill", Name: "queue_dropped_total",
			Help: "Followee backfills dropped because the queue was full (fetched at a later first read).",
		}),
	}
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "first_read", Name: "rejected_total",
		Help: "First reads refused by admission, by reason: rate_limited (per client), overloaded (global cap), postponed (an existing viewer's rebuild found the queue full; its stored feed was served).",
	}, []string{"reason"})
	m.droppedRecs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "backfill", Name: "records_dropped_total",
		Help: "Records a PDS listed that were dropped as malformed (a follow whose subject is not a DID, a record too large or deep, a key of the wrong form), by listing kind (follows, targets).",
	}, []string{"kind"})
	m.overLimitRecs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "backfill", Name: "records_over_limit_total",
		Help: "Records a PDS listed past the page limit we asked for, not read (the page's cursor already points past them), by listing kind (follows, targets).",
	}, []string{"kind"})
	m.longCursors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "backfill", Name: "cursor_too_long_total",
		Help: "PDS listing pages whose cursor was over 2,048 bytes; the round ended with that error.",
	})
	m.circles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "backfill", Name: "listings_in_circles_total",
		Help: "Listing rounds ended because the PDS paged in circles (a cursor it answered before, or a page of records the round listed already), by listing kind (follows, targets).",
	}, []string{"kind"})
	m.unlisted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "backfill", Name: "unlisted_removed_total",
		Help: "Stored records and follows deleted because a PDS listing showed them gone (deleted while the stream could not tell us, as in a gap).",
	})
	m.restored = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "backfill", Name: "unlisted_restored_total",
		Help: "Records and follows a listing had taken for deleted that a later listing found again and restored (a PDS that answered inconsistently, or a clock far off).",
	})
	m.lastReadCount = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "viewer", Name: "last_read_writes_total",
		Help: "Complete viewers' last-read times written after their read was served, by result: written, failed (kept the older time), queue_full (the read wrote its own before it was served).",
	}, []string{"result"})
	for _, result := range []string{"written", "failed", "queue_full"} {
		m.lastReadCount.WithLabelValues(result) // shown at 0 from the start
	}
	reg.MustRegister(m.lastReadCount)
	m.edited = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: "backfill", Name: "listed_edits_total",
		Help: "Stored records a listing found edited since they were written, an edit the stream missed (a gap, or an account out of scope), whose body and CID it took.",
	})
	// The kind-labelled counters are shown at 0 from the start, so that a
	// rate() or an alert over them has a series before the first hostile PDS.
	for _, kind := range listingKinds {
		for _, outcome := range []string{"ok", "error", "gone", "cut_off"} {
			m.runs.WithLabelValues(kind, outcome)
		}
		m.droppedRecs.WithLabelValues(kind)
		m.overLimitRecs.WithLabelValues(kind)
		m.circles.WithLabelValues(kind)
	}
	reg.MustRegister(m.rejections, m.droppedRecs, m.overLimitRecs, m.longCursors, m.circles, m.unlisted, m.restored, m.edited)
	reg.MustRegister(m.firstReads, m.firstReadTime, m.waitedOut, m.runs, m.runTime, m.pdsRequests, m.queue, m.dropped)
	return m
}

func (m *Metrics) firstRead(outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.firstReads.WithLabelValues(outcome).Inc()
	if took > 0 {
		m.firstReadTime.Observe(took.Seconds())
	}
}

func (m *Metrics) lastReads(result string, n int) {
	if m != nil {
		m.lastReadCount.WithLabelValues(result).Add(float64(n))
	}
}

func (m *Metrics) firstReadWaitedOut() {
	if m != nil {
		m.waitedOut.Inc()
	}
}

func (m *Metrics) run(kind, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.runs.WithLabelValues(kind, outcome).Inc()
	m.runTime.WithLabelValues(kind).Observe(took.Seconds())
}

func (m *Metrics) pdsRequest(outcome string) {
	if m != nil {
		m.pdsRequests.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) queueDepth(n int) {
	if m != nil {
		m.queue.Set(float64(n))
	}
}

func (m *Metrics) queueDropped() {
	if m != nil {
		m.dropped.Inc()
	}
}

func (m *Metrics) rejected(reason string) {
	if m != nil {
		m.rejections.WithLabelValues(reason).Inc()
	}
}

// droppedRecords counts the records a listing's stored pages dropped:
// malformed ones, and those past the page's limit.
func (m *Metrics) droppedRecords(kind string, malformed, overLimit int) {
	if m == nil {
		return
	}
	if malformed > 0 {
		m.droppedRecs.WithLabelValues(kind).Add(float64(malformed))
	}
	if overLimit > 0 {
		m.overLimitRecs.WithLabelValues(kind).Add(float64(overLimit))
	}
}

func (m *Metrics) reconciled(removed, restored, edited int) {
	if m == nil {
		return
	}
	m.unlisted.Add(float64(removed))
	m.restored.Add(float64(restored))
	m.edited.Add(float64(edited))
}

func (m *Metrics) pagedInCircles(kind string) {
	if m != nil {
		m.circles.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) cursorTooLong() {
	if m != nil {
		m.longCursors.Inc()
	}
}
