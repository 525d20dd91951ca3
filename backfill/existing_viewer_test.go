package backfill

import (
	"context"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
)

// README: "existing viewers never pass through either check" (the client
// bucket, the first-read queue). A gap marks every complete viewer for a
// rebuild; its next read goes through start(), which enqueues a place
// itself, and a full queue refuses it: getFeed answers 503 to a viewer
// whose feed is stored, instead of serving it while the rebuild waits.
// After a gap every reading viewer competes for max_running+max_queued
// places at once, so most reads fail until the rebuilds drain.
func TestAnExistingViewerDueARebuildIsNotRefusedItsFeed(t *testing.T) {
	w := newWorld(t, Config{Admission: AdmissionConfig{MaxRunning: 1, MaxQueued: -1}})
	ctx := context.Background()
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)
	if err := w.svc.Ensure(ctx, viewer, "following", "viewer-client"); err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Fatalf("setup: feed %v", got)
	}

	w.hogARunningPlace("hog", alice) // a new viewer whose PDS hangs holds the one place

	// A gap: the viewer is due a rebuild at its next read.
	if _, err := w.store.RecordGap(ctx, feeds.Gap{Detected: w.clock, CursorUS: 1, Size: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Ensure(ctx, viewer, "following", "viewer-client"); err != nil {
		t.Errorf("existing viewer with a stored feed (%d items) refused: %v", len(w.page(t, viewer, 10)), err)
	}
}
