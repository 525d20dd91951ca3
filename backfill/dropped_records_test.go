package backfill

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/pds/pdstest"
)

// A record a PDS lists that the backfill cannot use (a follow whose
// subject is a handle, or whose only subject is under a key the stream
// does not read) is dropped, and counted in a metric, not only in
// sync_runs (found by a review: the contract says hostile answers are
// counted in a metric and logged).
func TestRecordsDroppedFromAListingAreCountedInAMetric(t *testing.T) {
	w := newWorld(t, Config{})
	w.svc.metrics = NewMetrics(prometheus.NewRegistry()) // before any run
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, alice, 1)
	w.pds.AddRecord(viewer, followNSID, tid(2), `{"$type":"app.bsky.graph.follow","subject":"alice.test","createdAt":"2026-01-01T00:00:00Z"}`)
	dave := w.account("dave")
	w.pds.AddRecord(viewer, followNSID, tid(3), `{"$type":"app.bsky.graph.follow","Subject":"`+string(dave)+`","createdAt":"2026-01-01T00:00:00Z"}`)
	w.post(alice, 10)
	w.post(dave, 11)
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := len(w.page(t, viewer, 10)); got != 1 {
		t.Fatalf("feed has %d items, want alice's post alone", got)
	}
	if got := testutil.ToFloat64(w.svc.metrics.droppedRecs.WithLabelValues("follows")); got != 2 {
		t.Errorf("appview_backfill_records_dropped_total{kind=follows} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(w.svc.metrics.droppedRecs.WithLabelValues("targets")); got != 0 {
		t.Errorf("appview_backfill_records_dropped_total{kind=targets} = %v, want 0", got)
	}
}

// Records a PDS lists past the limit asked for are not read, and are no
// malformed records: they count in records_over_limit_total, not in
// records_dropped_total (a review of PLC and PDS answers found them
// counted as malformed).
func TestRecordsPastAPagesLimitAreNotCountedAsMalformed(t *testing.T) {
	w := newWorld(t, Config{Depth: 2})
	w.svc.metrics = NewMetrics(prometheus.NewRegistry()) // before any run
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, alice, 1)
	for i := range 5 {
		w.post(alice, 10+i)
	}
	w.pds.Fail(alice, postNSID, pdstest.FaultOverLimit) // 4 records to a limit of 2
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := len(w.page(t, viewer, 10)); got != 2 {
		t.Fatalf("feed has %d items, want alice's newest 2 (Depth)", got)
	}
	if got := testutil.ToFloat64(w.svc.metrics.overLimitRecs.WithLabelValues("targets")); got != 2 {
		t.Errorf("appview_backfill_records_over_limit_total{kind=targets} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(w.svc.metrics.droppedRecs.WithLabelValues("targets")); got != 0 {
		t.Errorf("appview_backfill_records_dropped_total{kind=targets} = %v, want 0: none was malformed", got)
	}
}
