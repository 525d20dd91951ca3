//go:build crash

package crashtest

import (
	"context"
	"testing"
	"time"

	"github.com/atfeeds/appview/failpoint"
)

// TestCrashFirstRead kills the daemon during first reads in read-driven
// mode: 18 runs, each reading the feeds of the first four viewers whose
// first read is not complete, ended by a SIGKILL at a random moment, at
// backfill.before_page (a page fetched, its rows and cursor not written)
// or at backfill.after_page (a page and its cursor committed, the next
// not fetched). Most viewers follow up to 350 accounts (the newest 230
// listed: pages of 100, 100, 30) and most authors hold up to 300 posts
// (the newest 150 listed: 100, 50), so kills land between the pages of a
// listing, which a later run resumes. A last run completes every first
// read; every viewer's feed, read through getFeed, must then be the one
// computed from the PDSes.
func TestCrashFirstRead(t *testing.T) {
	start := time.Now()
	w := NewPDSWorld(PDSWorldConfig{
		Seed: 11, Viewers: 54, Authors: 500, Unknown: 4, PDSes: 3, Window: 8,
		Limits: FirstReadLimits{Depth: 150, MaxFollows: 230, Cap: 500},
	})
	defer w.Close()
	h, err := NewFirstReadHarness(w, binary(t), workDir(t), 11)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Logf = t.Logf
	follows, posts := w.Counts()
	t.Logf("world: %d viewers, %d authors on %d PDSes, %d follow records, %d posts", w.Config.Viewers, w.Config.Authors, len(w.PDSes), follows, posts)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Poll(ctx, 100*time.Millisecond)
	stops := cycleStops(18, StopKill, StopAt(failpoint.BackfillBeforePage), StopAt(failpoint.BackfillAfterPage))
	for i, stop := range stops {
		if err := h.Run(ctx, stop); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	if err := h.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	n := noneWentBack(t, "a listing cursor", h.Polled)
	kills := h.Landed[StopKill]
	for _, name := range []string{failpoint.BackfillBeforePage, failpoint.BackfillAfterPage} {
		if h.Landed[StopAt(name)] == 0 {
			t.Errorf("no kill landed at %s", name)
		}
		kills += h.Landed[StopAt(name)]
	}
	if kills < 10 {
		t.Errorf("%d kills landed, want at least 10", kills)
	}
	if h.Resumed == 0 {
		t.Error("no listing was left between pages and resumed: the kills missed the listings")
	}
	mid := 0
	for _, m := range h.MidListing {
		if m > 0 {
			mid++
		}
	}
	t.Logf("stops: %s", landedSummary(h.Landed))
	t.Logf("%d of %d stops left listings between pages (%v); %d listings resumed from a stored page cursor; %d polled reads, no listing cursor went back",
		mid, len(stops), h.MidListing, h.Resumed, n)
	t.Logf("%d daemon runs, %s", h.runs, time.Since(start).Round(time.Second))
}
