package backfill

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/pds/pdstest"
)

// A caller's deadline that ends the wait for a first read (getFeed's,
// ahead of its write timeout) counts as the wait running out, as
// first_read_wait's own timer does; a client that went away does not.
func TestACallersDeadlineCountsAsAWaitRunOut(t *testing.T) {
	w := newWorld(t, Config{})
	w.svc.metrics = NewMetrics(prometheus.NewRegistry()) // before any run
	alice := w.account("alice")
	// A first read that completes, so the writes' statements are ready
	// and the deadlines below bound only the waits.
	warm := w.account("warm")
	w.follow(warm, alice, 9)
	if err := w.svc.Ensure(context.Background(), warm, "following", "warm"); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"deadline", "cancelled"} {
		viewer := w.account(name)
		w.follow(viewer, alice, i+1)
		w.pds.Fail(viewer, followNSID, pdstest.FaultHang)
		// Long enough for the viewer's registration to commit first on a
		// loaded machine (at 300 ms a -race run once ran out inside it).
		const wait = time.Second
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		if name == "cancelled" {
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(wait, cancel)
		}
		err := w.svc.Ensure(ctx, viewer, "following", name)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if got := testutil.ToFloat64(w.svc.metrics.waitedOut); got != 1 {
		t.Errorf("appview_first_read_waited_out_total = %v, want 1 (the deadline's, not the cancelled client's)", got)
	}
}
