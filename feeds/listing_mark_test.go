package feeds

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A follow that brings an account into scope marks its unfinished
// listings wanted (wantListings), and the page that completes such a
// listing merges the account into its complete followers' feeds
// (ApplyListingPage). A run already listing the account wrote its next
// page with the retry time it had read before the mark: none. The mark
// was gone, the completing page merged nothing, and the listed posts
// reached a complete follower only if the run's caller merged after,
// which a stop in between lost for good (found by a review of the cursor
// contract). An unfinished page write keeps a stored mark.
func TestAListingsMarkSurvivesTheRunningListingsNextPage(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds})
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	register(t, s, "w", "following")
	register(t, s, "v", "following")
	completeFirstRead(t, s, "v", now)

	// The run read a's listing state before w's follow marked it.
	run, err := s.ReadListing(ctx, did("a"), postNSID)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, follow("w", "a", "fw", 1))
	if l, _ := s.ReadListing(ctx, did("a"), postNSID); l.NextRetry.IsZero() {
		t.Fatal("setup: w's follow did not mark a's listing wanted")
	}
	run.Host, run.Round = "h", run.Round+1
	page := func(rkey string, complete bool) {
		t.Helper()
		run.Page++
		run.Complete = complete
		if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("a"), Collection: postNSID,
			Records: []ListedRecord{{RKey: syntax.RecordKey(rkey), CID: "bafy" + rkey,
				Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"x","createdAt":"2026-01-01T00:00:00Z"}`)}},
			To: run, FetchedAt: now}, now); err != nil {
			t.Fatal(err)
		}
	}
	page("3kaaaaaaaaa03", false)
	apply(t, s, follow("v", "a", "fv", 2)) // merges what is stored: 03
	page("3kaaaaaaaaa02", false)
	page("3kaaaaaaaaa01", true)
	got := feedRKeys(t, s, "following", "v", postNSID)
	slices.Sort(got)
	if want := []string{"3kaaaaaaaaa01", "3kaaaaaaaaa02", "3kaaaaaaaaa03"}; !slices.Equal(got, want) {
		t.Errorf("v's feed once a's listing completed = %v, want every listed post %v", got, want)
	}
	if l, _ := s.ReadListing(ctx, did("a"), postNSID); !l.Complete || !l.NextRetry.IsZero() {
		t.Errorf("listing after its last page: complete %v, retry %v; want complete, no retry", l.Complete, l.NextRetry)
	}
}
