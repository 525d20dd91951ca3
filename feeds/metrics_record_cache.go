package feeds

import "github.com/prometheus/client_golang/prometheus"

// recordCacheMetrics shows how well the record cache (record_cache.go)
// serves feed pages: a low hit share means the cache is too small for
// the records pages show.
type recordCacheMetrics struct {
	hits, misses prometheus.Counter
	bytes        prometheus.Gauge
	forgotAll    prometheus.Counter
}

func newRecordCacheMetrics(reg prometheus.Registerer) *recordCacheMetrics {
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "appview", Subsystem: "feed", Name: "record_cache_lookups_total",
		Help: "Records a feed page looked up in the record cache, by result: hit, or miss (read from the database).",
	}, []string{"result"})
	m := &recordCacheMetrics{
		hits:   lookups.WithLabelValues("hit"),
		misses: lookups.WithLabelValues("miss"),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "appview", Subsystem: "feed", Name: "record_cache_bytes",
			Help: "Approximate bytes the record cache holds (database.record_cache_mb bounds it).",
		}),
		forgotAll: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "appview", Subsystem: "feed", Name: "record_cache_resets_total",
			Help: "Times the record cache was emptied because another process (an operator command) committed to the database.",
		}),
	}
	reg.MustRegister(lookups, m.bytes, m.forgotAll)
	return m
}

// observeRecordCache counts one page's lookups.
func (m *Metrics) observeRecordCache(hits, misses int) {
	if m == nil || m.recordCache == nil {
		return
	}
	m.recordCache.hits.Add(float64(hits))
	m.recordCache.misses.Add(float64(misses))
}

// recordCacheSized returns the record cache's size callback: it sets the
// bytes gauge (nil without metrics).
func (m *Metrics) recordCacheSized() func(int64) {
	if m == nil || m.recordCache == nil {
		return nil
	}
	g := m.recordCache.bytes
	return func(b int64) { g.Set(float64(b)) }
}

// recordCacheForgotAll counts one emptying of the record cache.
func (m *Metrics) recordCacheForgotAll() {
	if m == nil || m.recordCache == nil {
		return
	}
	m.recordCache.forgotAll.Inc()
}
