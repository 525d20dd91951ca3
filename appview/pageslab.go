package appview

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atfeeds/appview/feeds"
)

// reservePageSlab gives SQLite's page caches one slab sized for the
// store's caches (feeds/pageslab.go), which halves what they cost in RSS.
// The slab is per process and sized by the first daemon; without it the
// caches work as before, so a failure is logged, not fatal.
func reservePageSlab(log *slog.Logger, mb int) {
	err := feeds.ReservePageSlab(mb)
	switch {
	case err == nil:
		// A later daemon of the same process (tests) shares the first
		// one's slab; the slab bounds all caches together.
		if u, err := feeds.PageSlab(); err == nil && u.PagesMB() < int64(mb) {
			log.Info("sqlite_page_slab_smaller", "component", "daemon",
				"slab_mb", u.PagesMB(), "caches_mb", mb)
		}
	case errors.Is(err, feeds.ErrPageSlabTooLate):
		log.Info("sqlite_page_slab_skipped", "component", "daemon", "reason", err)
	default:
		log.Warn("sqlite_page_slab_failed", "component", "daemon", "err", err)
	}
}

// pageSlabCollector exports the page caches' memory: the slab, what of it
// holds pages, and pages allocated outside it. Overflow growing while the
// slab is full says the caches want more than it holds.
type pageSlabCollector struct {
	size, used, overflow *prometheus.Desc
}

func newPageSlabCollector() *pageSlabCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("appview", "sqlite", name), help, nil, nil)
	}
	return &pageSlabCollector{
		size:     desc("page_slab_bytes", "Size of the slab SQLite's page caches allocate pages from; 0 without one."),
		used:     desc("page_slab_used_bytes", "Bytes of the page slab holding a cached page."),
		overflow: desc("page_overflow_bytes", "Bytes of cached pages allocated one by one, outside the slab."),
	}
}

func (c *pageSlabCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.used
	ch <- c.overflow
}

func (c *pageSlabCollector) Collect(ch chan<- prometheus.Metric) {
	u, err := feeds.PageSlab()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.size, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(u.Slots*u.SlotBytes))
	ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(u.UsedSlots*u.SlotBytes))
	ch <- prometheus.MustNewConstMetric(c.overflow, prometheus.GaugeValue, float64(u.OverflowBytes))
}
