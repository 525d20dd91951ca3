package backfill

import (
	"context"
	"testing"
	"time"
)

// A viewer follows an account on the live stream; the retry loop lists the
// account's backlog, and the daemon stops (or dies) right after the
// listing's last page commits, before the merge into the viewer's feed.
// The listing is complete then, so no retry ever lists it again: the merge
// must be part of the page that completes a listing someone waits for.
func TestABacklogListedJustBeforeAStopStillReachesTheFollowersFeed(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	acct := w.account("acct")
	w.post(acct, 10)
	ctx := context.Background()
	w.svc.Ensure(ctx, viewer, "following", "test") // no follows yet: an empty feed
	w.liveFollow(t, viewer, acct)

	// The shutdown lands once the listing's last page has committed.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	w.onNow.Store(func(time.Time) {
		if st, err := w.store.ReadListing(ctx, acct, postNSID); err == nil && st.Complete {
			stop()
		}
	})
	w.svc.retryDue(runCtx)
	w.onNow.Store(func(time.Time) {})
	if st, err := w.store.ReadListing(ctx, acct, postNSID); err != nil || !st.Complete {
		t.Fatalf("listing %+v (%v), want it complete before the stop", st, err)
	}

	// The next start's retry loop.
	w.svc.retryDue(ctx)
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Fatalf("feed after a stop between the listing and its merge = %v, want the followed account's post", got)
	}
}
