package backfill

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A first read cut off by its run timeout after it stored pages (its
// listing cursors moved) counts no attempt: a viewer who follows
// thousands of accounts on slow hosts needs several runs, each of which
// advances, and six such runs had it given up on. A run cut off with
// nothing stored still counts, so a viewer whose reads never get
// anywhere is still given up on.
func TestAFirstReadCutOffAfterProgressCountsNoAttempt(t *testing.T) {
	const runTimeout = time.Second // under the PDS client's 2 s request timeout
	w := newWorld(t, Config{RunTimeout: runTimeout, MaxAttempts: 2, RetryBase: time.Second,
		FirstReadWait: 10 * time.Second})
	ctx := context.Background()
	viewer := w.account("viewer")
	var accts []syntax.DID
	for i := range 3 {
		acct := w.account(fmt.Sprint("acct", i))
		w.follow(viewer, acct, 10+i)
		w.post(acct, 1000+i)
		accts = append(accts, acct)
	}
	// hang holds every request for the posts of the accounts given until
	// the run is cut off.
	hang := func(slow ...syntax.DID) {
		w.gate.Store(func(r *http.Request) {
			for _, d := range slow {
				if r.URL.Query().Get("repo") == string(d) {
					<-r.Context().Done()
				}
			}
		})
	}
	read := func(round string) {
		t.Helper()
		if err := w.svc.Ensure(ctx, viewer, "following", "viewer-client"); err != nil {
			t.Fatal(err)
		}
		st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
		t.Logf("%s: viewer %+v", round, st)
		w.advance(time.Hour)
		w.svc.forgetComplete()
	}

	// Run 1 stores the follows and acct2's posts; run 2 acct1's. Both are
	// cut off by acct0's PDS, which hangs.
	hang(accts[0], accts[1])
	read("run 1")
	hang(accts[0])
	read("run 2")
	st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
	if st.Attempts != 0 || st.Complete {
		t.Fatalf("after two runs cut off after progress: attempts %d (%q), complete %v; want 0 attempts, not complete",
			st.Attempts, st.LastError, st.Complete)
	}
	for _, a := range accts[1:] {
		if l, _ := w.store.ReadListing(ctx, a, postNSID); !l.Complete {
			t.Fatalf("setup: %s's posts not listed: %+v", a, l)
		}
	}

	// Runs 3 and 4 store nothing: the one listing left hangs. They count,
	// and the viewer is given up on.
	read("run 3")
	read("run 4")
	st, _ = w.store.RegisterViewer(ctx, viewer, "following", w.clock)
	if st.Attempts != 2 {
		t.Fatalf("after two runs cut off with nothing stored: attempts %d (%q), want 2", st.Attempts, st.LastError)
	}
}

// The runs cut off after progress that count no attempt are bounded: a
// hostile PDS can make a page of progress every run (answer a resumed
// cursor with an error that starts the round over, then hang), and the
// viewer, never given up on, would hold a running place for the run
// timeout at every retry for good (found by a review).
func TestRunsCutOffAfterProgressAreSparedOnlySoOften(t *testing.T) {
	const runTimeout = time.Second // under the PDS client's 2 s request timeout
	w := newWorld(t, Config{RunTimeout: runTimeout, MaxAttempts: 6, RetryBase: time.Second,
		FirstReadWait: 10 * time.Second})
	w.svc.maxSparedCutOffs = 1
	ctx := context.Background()
	viewer := w.account("viewer")
	var accts []syntax.DID
	for i := range 3 {
		acct := w.account(fmt.Sprint("acct", i))
		w.follow(viewer, acct, 10+i)
		w.post(acct, 1000+i)
		accts = append(accts, acct)
	}
	hang := func(slow ...syntax.DID) {
		w.gate.Store(func(r *http.Request) {
			for _, d := range slow {
				if r.URL.Query().Get("repo") == string(d) {
					<-r.Context().Done()
				}
			}
		})
	}
	attemptsAfter := func(round string) int {
		t.Helper()
		if err := w.svc.Ensure(ctx, viewer, "following", "viewer-client"); err != nil {
			t.Fatal(err)
		}
		st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
		w.advance(time.Hour)
		w.svc.forgetComplete()
		return st.Attempts
	}
	// Both runs store pages (run 1 the follows and acct2's posts, run 2
	// acct1's) and are cut off by acct0's PDS: the first is spared, the
	// second is past the bound and counts.
	hang(accts[0], accts[1])
	if n := attemptsAfter("run 1"); n != 0 {
		t.Fatalf("after the first run cut off after progress: %d attempts, want 0", n)
	}
	hang(accts[0])
	if n := attemptsAfter("run 2"); n != 1 {
		t.Fatalf("after a second run cut off after progress, past the bound of 1: %d attempts, want 1", n)
	}
}
