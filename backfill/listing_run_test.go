package backfill

import (
	"context"
	"testing"

	"github.com/atfeeds/appview/feeds"
)

// A listing's run is recorded with its last page (feeds.ListingPage.Finish),
// and only there: one run, counted as ensureListing counts it.
func TestAListingsRunIsRecordedOnceWithItsLastPage(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	alice := w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)
	w.post(alice, 11)
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	runs, err := w.store.RecentSyncRuns(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	var alices []feeds.SyncRun
	for _, r := range runs {
		if r.Subject == string(alice) {
			alices = append(alices, r)
		}
	}
	if len(alices) != 1 || alices[0].Kind != "targets" || alices[0].Pages != 1 || alices[0].Written != 2 || alices[0].Outcome != "ok" {
		t.Fatalf("alice's runs = %+v, want one targets run of one page, two posts written, ok", alices)
	}
}
