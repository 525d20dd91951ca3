package profiles

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/pds/pdstest"
)

// An account whose PDS endpoint answers 404 MethodNotImplemented (a host
// that is not a PDS, or lacks getRecord) has no profile fetched, not a
// missing one stored for good: the fetch failed, and is tried again.
func TestAHostWithoutGetRecordStoresNoMissingProfile(t *testing.T) {
	notPDS := pdstest.NewNotAPDS()
	t.Cleanup(notPDS.Close)
	w := newWorld(t, Config{Wait: 5 * time.Second}, "carol")
	w.plc.Add(did("carol"), "carol.test", notPDS.URL)

	if ps, _ := w.hydrate(t, "carol"); ps[0].Known {
		t.Fatalf("carol = %+v, stored as known from a host without getRecord", ps[0])
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("absent")); got != 0 {
		t.Errorf("absent fetches = %v, want 0", got)
	}
	if got := testutil.ToFloat64(w.svc.metrics.fetches.WithLabelValues("pds_error")); got != 1 {
		t.Errorf("pds_error fetches = %v, want 1", got)
	}
}
