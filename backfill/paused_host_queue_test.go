package backfill

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/pds/pdstest"
)

// pds.HostPauses: a host that answered 429 is left alone until its
// Retry-After, "no request is sent to it meanwhile". fetchPage checks the
// pause before it waits for a request slot (limits.Acquire), not after:
// every listing already queued for one of the host's PerHost slots sends
// its request once it gets one, into the pause. With the defaults
// (Concurrency 16, PerHost 4) one first read over 12 followees on a
// rate-limiting host sends 12 requests, not the at most 4 in flight when
// the first 429 came back. (TestARateLimitingHostIsLeftAloneUntilItsRetryAfter
// runs with Concurrency 1, where nothing waits for a slot.) Each request
// finishes (and notes the pause) before it releases its slot, so any
// request past the first PerHost was sent while the host was paused.
func TestNoRequestReachesAPausedHostFromTheSlotQueue(t *testing.T) {
	w := newWorld(t, Config{}) // Concurrency 16, PerHost 4
	viewer := w.account("viewer")
	var accts []syntax.DID
	for i := range 12 {
		a := w.account(fmt.Sprint("a", i))
		accts = append(accts, a)
		w.follow(viewer, a, i+1)
		w.post(a, 100+i)
		w.pds.Fail(a, postNSID, pdstest.FaultRateLimited) // Retry-After: 7 s
	}
	// The first PerHost requests are held until the other listings have
	// passed the pause check and wait for a slot, as on a slow host.
	var entered atomic.Int32
	release := make(chan struct{})
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("collection") == string(postNSID) {
			entered.Add(1)
			<-release
		}
	})
	done := make(chan error, 1)
	go func() { done <- w.svc.Ensure(context.Background(), viewer, "following", "test") }()
	for entered.Load() < int32(w.svc.cfg.PerHost) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	requests := 0
	for _, a := range accts {
		requests += w.pds.Requests(a, postNSID)
	}
	if requests > w.svc.cfg.PerHost {
		t.Errorf("%d requests reached the host, at most %d (PerHost, in flight when the first 429 came back) were sent before its pause; the clock stood still at %v",
			requests, w.svc.cfg.PerHost, w.clock.Format(time.RFC3339))
	}
}
