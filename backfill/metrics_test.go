package backfill

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestKindCountersAreShownAtZero: a dashboard's rate() over the hostile-PDS
// counters needs their series before the first hostile page arrives.
func TestKindCountersAreShownAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"appview_backfill_records_dropped_total":     true,
		"appview_backfill_records_over_limit_total":  true,
		"appview_backfill_listings_in_circles_total": true,
	}
	for _, f := range families {
		if !want[f.GetName()] {
			continue
		}
		kinds := map[string]float64{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					kinds[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
		for _, kind := range listingKinds {
			if v, ok := kinds[kind]; !ok || v != 0 {
				t.Errorf("%s{kind=%q}: present %v, value %v; want present at 0", f.GetName(), kind, ok, v)
			}
		}
		delete(want, f.GetName())
	}
	for name := range want {
		t.Errorf("%s not gathered at start", name)
	}
}
