package feeds

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A catch-up batch stays open up to 10 s, and a wait for another
// process's write lock adds to it: the batch histogram's finite buckets
// must reach past that. They stopped at 4.096 s, and the dashboard's p99
// read 4.096 s exactly when the ingest struggled (a review).
func TestTheBatchHistogramReachesPastALongBatch(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.observeBatch(BatchResult{}, 9500*time.Millisecond)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "appview_ingest_batch_seconds" {
			continue
		}
		buckets := f.GetMetric()[0].GetHistogram().GetBucket()
		for _, b := range buckets {
			if b.GetUpperBound() >= 9.5 && b.GetCumulativeCount() == 1 {
				return
			}
		}
		t.Fatalf("a 9.5 s batch falls past the last finite bucket (%v s)", buckets[len(buckets)-1].GetUpperBound())
	}
	t.Fatal("appview_ingest_batch_seconds not gathered")
}
