package feeds

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// Two runs on one listing (the daemon and an operator's backfill beside
// it): the one that fell behind applies its page after the other's, though
// it fetched it first, before an edit the stream missed. The page that got
// further took the edit; the stale page, which speaks for nothing, must not
// write the older body back.
func TestAStalePageDoesNotUndoAnEditAListingTook(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true})
	ctx := context.Background()
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "a1", 2))
	to := nextPage(t, s, did("alice"), postNSID)
	page := func(cid, text string, fetchedAt time.Time) ListingResult {
		t.Helper()
		res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID,
			Records: []ListedRecord{{RKey: "a1", CID: cid,
				Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"` + text + `"}`)}},
			To: to, FetchedAt: fetchedAt}, fetchedAt)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// The run ahead fetched after the edit and applied first.
	if res := page("bafyedited", "edited", reconcileAsOf.Add(10*time.Minute)); res.Edited != 1 {
		t.Fatalf("setup: the edit was not taken: %+v", res)
	}
	// The run behind fetched before the edit (the old body) and applies now.
	res := page("bafyposta1", "a1", reconcileAsOf)
	if !res.Stale {
		t.Fatalf("setup: the second page is not stale: %+v", res)
	}
	for _, it := range firstPage(t, s, "v1") {
		if it.RKey == "a1" && it.CID != "bafyedited" {
			t.Errorf("a1 served with CID %q after a stale page, want the edit the page ahead took (bafyedited)", it.CID)
		}
	}
}
