package backfill

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/atfeeds/appview/pds/pdstest"
)

// Config.RunTimeout "bounds one first read ... from its claim to the built
// feed", but start() creates the run's context before the run waits for a
// running slot: the time a first read spends queued behind other viewers'
// runs is taken from its own budget. A viewer queued behind a slow run gets
// the slot with little time left, is cut off, and is charged a failed
// attempt (timed_out) for load that was not its PDS's doing; after
// MaxAttempts such reads it is given up on for good, though its PDS answers
// well inside the run timeout.
func TestAQueuedFirstReadGetsItsRunTimeoutFromItsClaim(t *testing.T) {
	const runTimeout = 2 * time.Second
	w := newWorld(t, Config{RunTimeout: runTimeout, MaxAttempts: 2, RetryBase: time.Second,
		FirstReadWait: 3 * time.Second, Admission: AdmissionConfig{MaxRunning: 1}})
	ctx := context.Background()
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)

	for round := range 2 {
		// Another new viewer whose PDS hangs holds the one running slot
		// for its whole run timeout.
		w.hogARunningPlace(fmt.Sprint("hog", round), alice)
		time.Sleep(200 * time.Millisecond)

		// The viewer's PDS answers its first page in 500 ms, a quarter of the run
		// timeout.
		w.pds.FailN(viewer, followNSID, pdstest.FaultDelayed, 1)
		if err := w.svc.Ensure(ctx, viewer, "following", "viewer-client"); err != nil {
			t.Fatal(err)
		}
		st0, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
		t.Logf("round %d: viewer %+v", round, st0)
		w.advance(time.Hour)
		w.svc.forgetComplete()
	}
	st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
	if st.Attempts != 0 {
		t.Errorf("viewer charged %d failed attempts (%q) for time spent queued behind another viewer's run", st.Attempts, st.LastError)
	}
	// No load now: the viewer's next read must build its feed.
	if err := w.svc.Ensure(ctx, viewer, "following", "viewer-client"); err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, viewer, 10); len(got) != 1 {
		st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
		t.Errorf("feed = %v once the daemon is idle, want alice's post; viewer %+v", got, st)
	}
}
