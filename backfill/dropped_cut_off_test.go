package backfill

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A listing cut off by its caller's context (a first read's run timeout,
// a shutdown) after it dropped malformed records from the pages it
// committed still counts them: the next run resumes past those pages and
// never sees them again, so a hostile PDS that lists junk and then hangs
// until the run timeout had its junk dropped and never counted.
func TestRecordsDroppedByAListingCutOffAreCounted(t *testing.T) {
	w := newWorld(t, Config{})
	w.svc.metrics = NewMetrics(prometheus.NewRegistry())
	viewer := w.account("viewer")
	for i := range 150 { // pages of 100 and 50
		w.follow(viewer, did(fmt.Sprint("acct", i)), 10+i)
	}
	// The newest follow, on the first page, names a handle: dropped.
	w.pds.AddRecord(viewer, followNSID, tid(1000), `{"$type":"app.bsky.graph.follow","subject":"alice.test","createdAt":"2026-01-01T00:00:00Z"}`)
	if _, err := w.store.RegisterViewer(context.Background(), viewer, "following", w.clock); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") == string(viewer) && r.URL.Query().Get("cursor") != "" {
			cancel() // cut off while the second page is asked for
			<-r.Context().Done()
		}
	})
	err := w.svc.ensureListing(ctx, viewer, followNSID, 10_000, "follows")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("listing returned %v, want it cut off by its context", err)
	}
	if st, _ := w.store.ReadListing(context.Background(), viewer, followNSID); st.Page != 1 {
		t.Fatalf("setup: listing stands at page %d, want the first page committed", st.Page)
	}
	if got := testutil.ToFloat64(w.svc.metrics.droppedRecs.WithLabelValues("follows")); got != 1 {
		t.Errorf("appview_backfill_records_dropped_total{kind=follows} = %v after a run cut off past the record, want 1", got)
	}
	// The run itself is counted, and timed: left out, the slowest runs (a
	// hanging PDS, cut off by RunTimeout) were missing (a review).
	if got := testutil.ToFloat64(w.svc.metrics.runs.WithLabelValues("follows", "cut_off")); got != 1 {
		t.Errorf("appview_backfill_runs_total{kind=follows,outcome=cut_off} = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(w.svc.metrics.runTime); got != 1 {
		t.Errorf("run_duration_seconds has %d series, want the cut-off run's kind", got)
	}
}

// A page whose write failed is fetched again by the next run, and its
// dropped records are counted then: counted at the fetch, as they were,
// they were counted once for every attempt.
func TestRecordsDroppedFromAPageThatWasNotStoredAreCountedOnce(t *testing.T) {
	w := newWorld(t, Config{})
	w.svc.metrics = NewMetrics(prometheus.NewRegistry())
	viewer := w.account("viewer")
	for i := range 5 {
		w.follow(viewer, did(fmt.Sprint("acct", i)), 10+i)
	}
	w.pds.AddRecord(viewer, followNSID, tid(1000), `{"$type":"app.bsky.graph.follow","subject":"alice.test","createdAt":"2026-01-01T00:00:00Z"}`)
	if _, err := w.store.RegisterViewer(context.Background(), viewer, "following", w.clock); err != nil {
		t.Fatal(err)
	}
	dropped := func() float64 {
		return testutil.ToFloat64(w.svc.metrics.droppedRecs.WithLabelValues("follows"))
	}
	// The first run's context ends once the page has come back, before
	// it is written: the first clock reading after the PDS was asked.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var asked atomic.Bool
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") == string(viewer) {
			asked.Store(true)
		}
	})
	w.onNow.Store(func(time.Time) {
		if asked.Load() {
			cancel()
		}
	})
	if err := w.svc.ensureListing(ctx, viewer, followNSID, 10_000, "follows"); !errors.Is(err, context.Canceled) {
		t.Fatalf("listing returned %v, want it cut off by its context", err)
	}
	if st, _ := w.store.ReadListing(context.Background(), viewer, followNSID); st.Page != 0 {
		t.Fatalf("setup: listing stands at page %d, want the page not written", st.Page)
	}
	if got := dropped(); got != 0 {
		t.Errorf("appview_backfill_records_dropped_total{kind=follows} = %v after the page was not written, want 0", got)
	}
	w.onNow.Store(func(time.Time) {})
	if err := w.svc.ensureListing(context.Background(), viewer, followNSID, 10_000, "follows"); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.store.ReadListing(context.Background(), viewer, followNSID); !st.Complete {
		t.Fatalf("setup: the second run left the listing incomplete: %+v", st)
	}
	if got := dropped(); got != 1 {
		t.Errorf("appview_backfill_records_dropped_total{kind=follows} = %v after the page was fetched twice and written once, want 1", got)
	}
}
