package feeds

import (
	"context"
	"testing"
	"time"
)

// A listing's last page records its run in the page's own transaction
// (ListingPage.Finish): one write where the page and its run took two.
// Finish sees the page's result, and a run it does not give (here, as
// backfill does, for a stale page: another run is ahead) is not recorded.
func TestAListingsLastPageRecordsItsRun(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true})
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	var seen []ListingResult
	finish := func(res ListingResult) (SyncRun, bool) {
		seen = append(seen, res)
		return SyncRun{Kind: "targets", Subject: string(did("dave")), Collection: postNSID, Outcome: "ok",
			Pages: 1, Written: res.Written, Started: now.Add(-time.Second), Duration: time.Second}, !res.Stale
	}
	to := nextPage(t, s, did("dave"), postNSID)
	to.Complete = true
	page := &ListingPage{Account: did("dave"), Collection: postNSID, Records: listed("d1", "d2"), To: to, FetchedAt: now, Finish: finish}
	res, err := s.ApplyListingPage(ctx, page, now)
	if err != nil {
		t.Fatal(err)
	}
	if !res.RunRecorded || res.Written != 2 || len(seen) != 1 || seen[0].Written != 2 {
		t.Fatalf("result %+v, Finish saw %+v: want the run recorded, Finish told of the 2 records written", res, seen)
	}
	runs, err := s.RecentSyncRuns(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Subject != string(did("dave")) || runs[0].Written != 2 || runs[0].Pages != 1 {
		t.Fatalf("runs = %+v, want dave's run of one page, two records written", runs)
	}

	// The same page again is stale: Finish gives no run.
	res, err = s.ApplyListingPage(ctx, page, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.RunRecorded || !res.Stale {
		t.Errorf("stale page: %+v, want stale and no run recorded", res)
	}
	if runs, _ := s.RecentSyncRuns(ctx, 10); len(runs) != 1 {
		t.Errorf("%d runs after a stale page, want the one", len(runs))
	}
}
