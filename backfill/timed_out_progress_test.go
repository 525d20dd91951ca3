package backfill

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// A first read cut off by its run timeout after it stored pages (its
// listing cursors moved) counts no attempt: a viewer who follows
// thousands of accounts on slow hosts needs several runs, each of which
// advances, and six such runs had it given up on. A run cut off with
// nothing stored still counts, so a viewer whose reads never get
// anywhere is still given up on.
func TestAFirstReadCutOffAfterProgressCountsNoAttempt(t *testing.T) {
	w := newCutOffWorld(t, 2)
	ctx := context.Background()

	// Run 1 stores the follows and acct2's posts; run 2 acct1's. Both are
	// cut off by acct0's PDS, which hangs.
	w.hang(w.accts[0], w.accts[1])
	w.read(t, "run 1")
	w.hang(w.accts[0])
	if st := w.read(t, "run 2"); st.Attempts != 0 || st.Complete {
		t.Fatalf("after two runs cut off after progress: attempts %d (%q), complete %v; want 0 attempts, not complete",
			st.Attempts, st.LastError, st.Complete)
	}
	for _, a := range w.accts[1:] {
		if l, _ := w.store.ReadListing(ctx, a, postNSID); !l.Complete {
			t.Fatalf("setup: %s's posts not listed: %+v", a, l)
		}
	}

	// Runs 3 and 4 store nothing: the one listing left hangs. They count,
	// and the viewer is given up on.
	w.read(t, "run 3")
	if st := w.read(t, "run 4"); st.Attempts != 2 {
		t.Fatalf("after two runs cut off with nothing stored: attempts %d (%q), want 2", st.Attempts, st.LastError)
	}
}

// The runs cut off after progress that count no attempt are bounded: a
// hostile PDS can make a page of progress every run (answer a resumed
// cursor with an error that starts the round over, then hang), and the
// viewer, never given up on, would hold a running place for the run
// timeout at every retry for good (found by a review).
func TestRunsCutOffAfterProgressAreSparedOnlySoOften(t *testing.T) {
	w := newCutOffWorld(t, 6)
	w.svc.maxSparedCutOffs = 1
	// Both runs store pages (run 1 the follows and acct2's posts, run 2
	// acct1's) and are cut off by acct0's PDS: the first is spared, the
	// second is past the bound and counts.
	w.hang(w.accts[0], w.accts[1])
	if st := w.read(t, "run 1"); st.Attempts != 0 {
		t.Fatalf("after the first run cut off after progress: %d attempts, want 0", st.Attempts)
	}
	w.hang(w.accts[0])
	if st := w.read(t, "run 2"); st.Attempts != 1 {
		t.Fatalf("after a second run cut off after progress, past the bound of 1: %d attempts, want 1", st.Attempts)
	}
}

// cutOffWorld is a viewer following three accounts, each with a post,
// under a run timeout of a second (under the PDS client's 2 s request
// timeout).
type cutOffWorld struct {
	*world
	viewer syntax.DID
	accts  []syntax.DID
}

func newCutOffWorld(t *testing.T, maxAttempts int) *cutOffWorld {
	t.Helper()
	w := &cutOffWorld{world: newWorld(t, Config{RunTimeout: time.Second, MaxAttempts: maxAttempts,
		RetryBase: time.Second, FirstReadWait: 10 * time.Second})}
	w.viewer = w.account("viewer")
	for i := range 3 {
		acct := w.account(fmt.Sprint("acct", i))
		w.follow(w.viewer, acct, 10+i)
		w.post(acct, 1000+i)
		w.accts = append(w.accts, acct)
	}
	return w
}

// hang holds every request for the posts of the accounts given until the
// run is cut off.
func (w *cutOffWorld) hang(slow ...syntax.DID) {
	w.gate.Store(func(r *http.Request) {
		for _, d := range slow {
			if r.URL.Query().Get("repo") == string(d) {
				<-r.Context().Done()
			}
		}
	})
}

// read runs a first read and returns the viewer's registration after it,
// then moves the clock past its retry time.
func (w *cutOffWorld) read(t *testing.T, round string) feeds.ViewerStatus {
	t.Helper()
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, w.viewer, "following", "viewer-client"); err != nil {
		t.Fatal(err)
	}
	st, _ := w.store.RegisterViewer(ctx, w.viewer, "following", w.clock)
	t.Logf("%s: viewer %+v", round, st)
	w.advance(time.Hour)
	w.svc.forgetComplete()
	return st
}
