package backfill

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Two viewers A and B follow X. A's first read owns the fetch of X's posts
// (ensureAccount); B's first read joins it and waits. A's run timeout
// passes after X's page was fetched, before it is applied (as when A waits
// for the writer behind an ingest batch): ApplyListingPage fails on the
// ended context. B used to hear A's context error, ignore it and complete
// its first read without X's posts, and as the failed page was never
// recorded on X's listing (no next_retry), the retry loop never took it up:
// B's feed lacked X for good (found by a review). Now B takes the fetch
// over, and a listing whose page could not be written is due again.
func TestASharedFolloweeFetchCutOffByItsOwnersTimeoutIsNotLost(t *testing.T) {
	const runTimeout = 1500 * time.Millisecond
	w := newWorld(t, Config{RunTimeout: runTimeout, FirstReadWait: 50 * time.Millisecond})
	ctx := context.Background()
	a, b, x := w.account("a"), w.account("b"), w.account("x")
	w.follow(a, x, 1)
	w.follow(b, x, 2)
	w.post(x, 10)
	w.post(x, 11)

	var (
		deadline   time.Time // after A's run context has ended
		xAsked     = make(chan struct{})
		bJoined    = make(chan struct{})
		xAnswered  atomic.Bool
		askedOnce  sync.Once
		armedClock atomic.Bool
	)
	w.gate.Store(func(r *http.Request) {
		q := r.URL.Query()
		if q.Get("repo") == string(x) && q.Get("collection") == string(postNSID) && !xAnswered.Load() {
			askedOnce.Do(func() { close(xAsked) })
			<-bJoined // A's fetch of X is held until B waits on it
			xAnswered.Store(true)
		}
	})
	w.onNow.Store(func(time.Time) {
		// The first clock reading after X's page came back (the host
		// pause's Note, in A's run) waits until A's run timeout has passed: A then applies
		// the page with an ended context.
		if armedClock.Load() && xAnswered.Load() {
			time.Sleep(time.Until(deadline))
		}
	})

	bWaits := make(chan struct{}, 1)
	w.onJoin.Store(func(k accountKey) {
		if k.account == x && k.collection == postNSID {
			select {
			case bWaits <- struct{}{}:
			default:
			}
		}
	})

	deadline = time.Now().Add(runTimeout + 300*time.Millisecond)
	armedClock.Store(true)
	if err := w.svc.Ensure(ctx, a, "following", "client-a"); err != nil {
		t.Fatal(err)
	}
	<-xAsked // A owns the fetch of X now
	// B starts late enough that its own run timeout ends well after A's.
	time.Sleep(time.Until(deadline.Add(-runTimeout / 2)))
	if err := w.svc.Ensure(ctx, b, "following", "client-b"); err != nil {
		t.Fatal(err)
	}
	// B lists its follows, then joins A's fetch of X.
	select {
	case <-bWaits:
	case <-time.After(10 * time.Second):
		t.Fatal("B never joined A's fetch of X")
	}
	close(bJoined)

	// Wait for B's first read to end.
	for i := 0; ; i++ {
		st, err := w.store.RegisterViewer(ctx, b, "following", w.clock)
		if err != nil {
			t.Fatal(err)
		}
		if st.Complete || st.Attempts > 0 {
			break
		}
		if i > 500 {
			t.Fatal("B's first read never ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	armedClock.Store(false)
	// B, still running when A was cut off, took the fetch of X over: its
	// first read built its feed with X's posts.
	if got := w.page(t, b, 10); len(got) != 2 {
		t.Errorf("B's feed after its first read = %v, want X's 2 posts", got)
	}
	// A's run records its failure and gives its claim back.
	for i := 0; ; i++ {
		st, err := w.store.RegisterViewer(ctx, a, "following", w.clock)
		if err != nil {
			t.Fatal(err)
		}
		if st.ClaimOwner == "" || st.Complete {
			break
		}
		if i > 500 {
			t.Fatalf("A's first read never ended: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Whatever the backfill does next (the retry loop, A's own retry),
	// B's feed must end up with X's posts.
	w.advance(10 * time.Minute)
	w.svc.retryDue(ctx)
	w.svc.forgetComplete()
	if err := w.svc.Ensure(ctx, a, "following", "client-a"); err != nil {
		t.Fatal(err)
	}
	w.svc.retryDue(ctx)

	st, _ := w.store.ReadListing(ctx, x, postNSID)
	bst, _ := w.store.RegisterViewer(ctx, b, "following", w.clock)
	if got := w.page(t, b, 10); len(got) != 2 {
		t.Errorf("B (complete=%v, %+v) feed = %v, want X's 2 posts; X's listing %+v; A's feed %v",
			bst.Complete, bst, got, st, w.page(t, a, 10))
	}
}
