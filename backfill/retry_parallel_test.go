package backfill

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atfeeds/appview/pds/pdstest"
)

// The retry loop takes up to 100 due listings a minute. One whose PDS
// hangs must not hold back the others behind it for its request timeout
// (raised by a review: retries ran one after another, so a handful of
// hostile hosts delayed every legitimate retry and merge by minutes).
func TestARetryThatHangsDoesNotHoldBackTheOthers(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Minute})
	viewer, other := w.account("viewer"), w.account("other")
	hanging, good := w.account("hanging"), w.account("good")
	w.follow(other, hanging, 1)
	w.follow(viewer, good, 2)
	w.post(hanging, 10)
	w.post(good, 11)
	// Both followees fail at their first reads, hanging's first, so its
	// listing is due first.
	w.pds.Fail(hanging, postNSID, pdstest.FaultStatus500)
	w.pds.Fail(good, postNSID, pdstest.FaultStatus500)
	w.svc.Ensure(context.Background(), other, "following", "test")
	w.advance(10 * time.Second)
	w.svc.Ensure(context.Background(), viewer, "following", "test")

	w.pds.Fail(hanging, postNSID, pdstest.FaultHang)
	w.pds.Fail(good, postNSID, pdstest.FaultNone)
	var hangingGaveUp, goodWhileHanging atomic.Bool
	w.gate.Store(func(r *http.Request) {
		switch r.URL.Query().Get("repo") {
		case string(hanging):
			go func() { <-r.Context().Done(); hangingGaveUp.Store(true) }()
		case string(good):
			// hanging's listing is due first: one after another, good's
			// request would wait for hanging's to time out.
			goodWhileHanging.Store(!hangingGaveUp.Load())
		}
	})
	w.advance(10 * time.Minute)
	w.svc.retryDue(context.Background())
	if !goodWhileHanging.Load() {
		t.Error("good's retry waited for the hanging one to give up")
	}
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Errorf("feed after the retries = %v, want good's post", got)
	}
}
