package backfill

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds/pdstest"
)

// TestPDSFaultsEndInARecordedState: every misbehaviour ends the account's
// listing with a recorded error and a retry time, the first read still
// completes with what could be fetched, and nothing hangs.
func TestPDSFaultsEndInARecordedState(t *testing.T) {
	faults := map[string]pdstest.Fault{
		"500":           pdstest.FaultStatus500,
		"429":           pdstest.FaultRateLimited,
		"hang":          pdstest.FaultHang,
		"truncated":     pdstest.FaultTruncated,
		"huge body":     pdstest.FaultHugeBody,
		"deactivated":   pdstest.FaultRepoDeactivated,
		"wrong type":    pdstest.FaultWrongContentType,
		"not json":      pdstest.FaultBadJSON,
		"repeat cursor": pdstest.FaultRepeatCursor,
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, Config{})
			viewer := w.account("viewer")
			bad := w.account("bad")
			w.follow(viewer, bad, 1)
			for i := range 3 {
				w.post(bad, 10+i)
			}
			w.pds.Fail(bad, postNSID, fault)
			done := make(chan struct{})
			go func() {
				defer close(done)
				w.svc.Ensure(context.Background(), viewer, "following", "test")
			}()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("first read hung")
			}
			st, err := w.store.ReadListing(context.Background(), bad, postNSID)
			if err != nil {
				t.Fatal(err)
			}
			if fault == pdstest.FaultRepeatCursor {
				// A cursor that does not advance ends the listing after one
				// page, never a loop.
				if !st.Complete || w.pds.Requests(bad, postNSID) > 2 {
					t.Fatalf("listing = %+v after %d requests", st, w.pds.Requests(bad, postNSID))
				}
				return
			}
			wantAttempts := 1
			if fault == pdstest.FaultRateLimited {
				wantAttempts = 0 // the host's limit, not the account's failure
			}
			if st.Complete || st.LastError == "" || st.Attempts != wantAttempts || !st.NextRetry.After(w.clock) {
				t.Fatalf("listing = %+v, want a recorded failure", st)
			}
			if fault == pdstest.FaultRepoDeactivated && !st.Gone {
				t.Errorf("deactivated repo not marked gone: %+v", st)
			}
			if n := len(w.page(t, viewer, 10)); n != 0 {
				t.Errorf("feed holds %d items from a failing PDS", n)
			}
		})
	}
}

// TestInterruptedListingResumesFromItsPageCursor cancels a backfill while
// the viewer's follow listing is half done (the third page is in flight),
// then runs it again: the pages already committed are not fetched again.
func TestInterruptedListingResumesFromItsPageCursor(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	for i := range 350 {
		w.follow(viewer, did(fmt.Sprint("acct", i)), i)
	}
	// Only viewers' follows are stored.
	if _, err := w.store.RegisterViewer(context.Background(), viewer, "following", w.clock); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var followPages atomic.Int32
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") == string(viewer) && followPages.Add(1) == 3 {
			cancel() // the daemon dies while page 3 is in flight
			<-r.Context().Done()
		}
	})
	if err := w.svc.ensureListing(ctx, viewer, followNSID, 10_000, "follows"); err == nil {
		t.Fatal("cancelled listing reported success")
	}
	st, _ := w.store.ReadListing(context.Background(), viewer, followNSID)
	if st.Page != 2 || st.Complete || st.Cursor == "" {
		t.Fatalf("after interruption listing = %+v, want 2 committed pages with their cursor", st)
	}
	stored, _ := w.store.Followees(context.Background(), viewer, followNSID)
	if len(stored) != 200 {
		t.Fatalf("%d follows stored, want the 200 of the committed pages", len(stored))
	}
	before := w.pds.Requests(viewer, followNSID)
	if err := w.svc.ensureListing(context.Background(), viewer, followNSID, 10_000, "follows"); err != nil {
		t.Fatal(err)
	}
	st, _ = w.store.ReadListing(context.Background(), viewer, followNSID)
	// Pages 3 and 4, and the empty page 5 that confirms the end.
	if !st.Complete || st.Page != 5 {
		t.Fatalf("resumed listing = %+v, want complete at page 5", st)
	}
	if got := w.pds.Requests(viewer, followNSID) - before; got != 3 {
		t.Errorf("resume fetched %d pages, want the 3 not yet committed", got)
	}
	stored, _ = w.store.Followees(context.Background(), viewer, followNSID)
	if len(stored) != 350 {
		t.Errorf("%d follows stored, want 350", len(stored))
	}
}

// TestResumedListingStopsAtItsLimit interrupts a listing bounded by the
// depth (150: pages of 100 and 50) after its first page and resumes it:
// the resumed run asks for the 50 its limit has left, not another 100,
// and stores exactly the newest 150 records. A crash test found the
// resumed run storing 200 and the feed built from them.
func TestResumedListingStopsAtItsLimit(t *testing.T) {
	w := newWorld(t, Config{Depth: 150})
	viewer, author := w.account("viewer"), w.account("author")
	w.follow(viewer, author, 1)
	for i := range 300 {
		w.post(author, 10+i)
	}
	// The viewer's follows are stored first, as in a first read: an
	// account's posts are listed only while a viewer follows it.
	if _, err := w.store.RegisterViewer(context.Background(), viewer, "following", w.clock); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.ensureListing(context.Background(), viewer, followNSID, 10_000, "follows"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var limits []string
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") != string(author) {
			return
		}
		mu.Lock()
		limits = append(limits, r.URL.Query().Get("limit"))
		n := len(limits)
		mu.Unlock()
		if n == 2 {
			cancel() // the daemon dies while page 2 is in flight
			<-r.Context().Done()
		}
	})
	if err := w.svc.ensureListing(ctx, author, postNSID, 150, "targets"); err == nil {
		t.Fatal("cancelled listing reported success")
	}
	// The viewer's first read resumes the author's listing.
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	st, _ := w.store.ReadListing(context.Background(), author, postNSID)
	if !st.Complete || st.Fetched != 150 {
		t.Fatalf("resumed listing = %+v, want complete with 150 fetched", st)
	}
	mu.Lock()
	got := fmt.Sprint(limits)
	mu.Unlock()
	if want := fmt.Sprint([]string{"100", "50", "50"}); got != want {
		t.Errorf("page limits asked %s, want %s", got, want)
	}
	if n := len(w.page(t, viewer, 200)); n != 150 {
		t.Errorf("feed holds %d posts, want the author's newest 150", n)
	}
}

// TestDeletedFollowStaysDeleted: a follow deleted on the live stream while
// the viewer's follows are being listed never comes back from the stale
// listing page.
func TestDeletedFollowStaysDeleted(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	gone, kept := w.account("gone"), w.account("kept")
	rkGone := w.follow(viewer, gone, 1)
	w.follow(viewer, kept, 2)
	// Jetstream delivers the delete (the viewer is registered, so it is in
	// scope) before the listing page, fetched earlier, is written.
	if _, err := w.store.RegisterViewer(context.Background(), viewer, "following", w.clock); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.ApplyBatch(context.Background(), &feeds.Batch{Changes: []feeds.Change{{
		DID: viewer, Collection: followNSID, RKey: rkGone, Op: feeds.OpDelete,
		Rev: string(tid(100)), TimeUS: w.clock.UnixMicro(),
	}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	followees, _ := w.store.Followees(context.Background(), viewer, followNSID)
	if len(followees) != 1 || followees[0] != kept {
		t.Fatalf("followees = %v, want only %s", followees, kept)
	}
}

// TestFailedAccountIsRetriedOnItsSchedule: a followee whose PDS failed
// during the first read is retried once its retry time passes, and its
// posts are merged into the feed that completed without them.
func TestFailedAccountIsRetriedOnItsSchedule(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Minute})
	viewer := w.account("viewer")
	flaky := w.account("flaky")
	w.follow(viewer, flaky, 1)
	w.post(flaky, 10)
	w.pds.Fail(flaky, postNSID, pdstest.FaultStatus500)
	w.svc.Ensure(context.Background(), viewer, "following", "test")
	if n := len(w.page(t, viewer, 10)); n != 0 {
		t.Fatalf("feed has %d items while the PDS fails", n)
	}
	w.pds.Fail(flaky, postNSID, pdstest.FaultNone)
	w.svc.retryDue(context.Background()) // not due yet
	if n := len(w.page(t, viewer, 10)); n != 0 {
		t.Fatal("retried before the retry time")
	}
	w.clock = w.clock.Add(2 * time.Minute)
	w.svc.retryDue(context.Background())
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Fatalf("feed after the retry = %v, want the flaky account's post", got)
	}
}

// TestFirstReadIsCutOffAtItsRunTimeout: a viewer whose own PDS never
// answers holds a running slot no longer than the run timeout; the run
// fails like any other, with its retry scheduled, and the slot is free.
func TestFirstReadIsCutOffAtItsRunTimeout(t *testing.T) {
	w := newWorld(t, Config{RunTimeout: 300 * time.Millisecond, FirstReadWait: 5 * time.Second,
		Admission: AdmissionConfig{MaxRunning: 1}})
	viewer := w.account("viewer")
	w.follow(viewer, w.account("alice"), 1)
	w.pds.Fail(viewer, followNSID, pdstest.FaultHang)

	start := time.Now()
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("first read held its request %s, want about the 300ms run timeout", took)
	}
	st, err := w.store.RegisterViewer(context.Background(), viewer, "following", w.clock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Complete || st.Attempts != 1 || !st.NextRetry.After(w.clock) {
		t.Fatalf("viewer = %+v, want one failed attempt with a retry scheduled", st)
	}
	// Until its retry is due, the viewer's reads are answered from memory:
	// the first one after the failure looks the state up, later ones touch
	// no database (a cancelled context would fail any query).
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.svc.Ensure(cancelled, viewer, "following", "test"); err != nil {
		t.Fatalf("a viewer not due again was not served from memory: %v", err)
	}
	// The one running slot is free again: another new viewer's first read
	// runs and completes.
	other := w.account("other")
	w.follow(other, w.account("bob"), 2)
	if err := w.svc.Ensure(context.Background(), other, "following", "test2"); err != nil {
		t.Fatalf("next first read: %v", err)
	}
	if st, _ := w.store.RegisterViewer(context.Background(), other, "following", w.clock); !st.Complete {
		t.Fatalf("next first read did not complete: %+v", st)
	}
}

// Two runs on one follow listing (a viewer opening two feeds built on the
// same follows): the one that falls behind finds its page stale, and goes
// on from where the other stands rather than ending early. Ending early
// would let its first read build the feed on half the follows.
func TestARunThatFallsBehindFinishesTheListing(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	for i := range 250 { // pages of 100, 100 and 50
		w.follow(viewer, did(fmt.Sprint("acct", i)), i)
	}
	if _, err := w.store.RegisterViewer(context.Background(), viewer, "following", w.clock); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{} // requests per cursor
	var cursors []string     // in the order first asked
	bBlocked, aBlocked := make(chan struct{}), make(chan struct{})
	releaseB, releaseA := make(chan struct{}), make(chan struct{})
	w.gate.Store(func(r *http.Request) {
		q := r.URL.Query()
		if q.Get("repo") != string(viewer) {
			return
		}
		c := q.Get("cursor")
		mu.Lock()
		seen[c]++
		if seen[c] == 1 {
			cursors = append(cursors, c)
		}
		n, at := seen[c], slices.Index(cursors, c)
		mu.Unlock()
		switch {
		case at == 0 && n == 1: // run B's first page
			close(bBlocked)
			<-releaseB
		case at == 2 && n == 1: // run A's third page
			close(aBlocked)
			<-releaseA
		}
	})
	run := func() chan error {
		done := make(chan error, 1)
		go func() { done <- w.svc.ensureListing(context.Background(), viewer, followNSID, 10_000, "follows") }()
		return done
	}
	b := run()
	<-bBlocked
	a := run() // stores pages 1 and 2, then waits on page 3
	<-aBlocked
	close(releaseB) // B's page 1 is stale now
	if err := <-b; err != nil {
		t.Fatal(err)
	}
	st, _ := w.store.ReadListing(context.Background(), viewer, followNSID)
	stored, _ := w.store.Followees(context.Background(), viewer, followNSID)
	close(releaseA)
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	if !st.Complete || len(stored) != 250 {
		t.Errorf("when the run that fell behind returned: listing %+v, %d follows stored; want it complete with 250", st, len(stored))
	}
}

// A viewer follows an account on the live stream and the in-memory queue
// never runs the account's backfill (it was full, or the daemon stopped
// first): the follow's transaction marked the account's listing due, so
// the retry loop fetches it and merges it into the viewer's feed.
func TestLiveFollowsBacklogSurvivesALostQueue(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	acct := w.account("acct")
	w.post(acct, 10)
	ctx := context.Background()
	w.svc.Ensure(ctx, viewer, "following", "test") // no follows yet: an empty feed
	res, err := w.store.ApplyBatch(ctx, &feeds.Batch{Changes: []feeds.Change{liveFollowChange(viewer, acct)}, Cursor: feeds.StreamCursor{TimeUS: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NewFollows) != 1 {
		t.Fatalf("new follows %+v, want the one edge (dropped here, never queued)", res.NewFollows)
	}
	w.svc.retryDue(ctx)
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Fatalf("feed after the retry loop = %v, want the followed account's post", got)
	}
}

// A PDS that answers 429 is left alone for the time it asked for: the
// other listings on that host fail without a request, and none of them is
// counted an attempt, so a host's rate limit never makes the backfill give
// up on its accounts.
func TestARateLimitingHostIsLeftAloneUntilItsRetryAfter(t *testing.T) {
	w := newWorld(t, Config{Concurrency: 1})
	viewer := w.account("viewer")
	accts := []syntax.DID{w.account("a1"), w.account("a2"), w.account("a3")}
	for i, a := range accts {
		w.follow(viewer, a, i+1)
		w.post(a, 10+i)
		w.pds.Fail(a, postNSID, pdstest.FaultRateLimited) // Retry-After: 7 s
	}
	ctx := context.Background()
	w.svc.Ensure(ctx, viewer, "following", "test")
	requests := 0
	for _, a := range accts {
		requests += w.pds.Requests(a, postNSID)
		st, err := w.store.ReadListing(ctx, a, postNSID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Complete || st.Attempts != 0 || st.NextRetry.Before(w.clock.Add(7*time.Second)) {
			t.Errorf("%s listing %+v, want no attempt counted and a retry after the host's 7 s", a, st)
		}
	}
	if requests != 1 {
		t.Errorf("%d requests reached the rate-limiting host, want 1", requests)
	}

	// After the pause the host is asked again, and answers.
	for _, a := range accts {
		w.pds.Fail(a, postNSID, pdstest.FaultNone)
	}
	w.clock = w.clock.Add(8 * time.Second)
	w.svc.retryDue(ctx)
	if got := w.page(t, viewer, 10); len(got) != 3 {
		t.Errorf("feed after the pause = %v, want the 3 posts", got)
	}
}
