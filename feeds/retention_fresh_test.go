package feeds

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A listing that runs before the stream has ever moved the cursor (an
// operator's `appview backfill` on a new database, or a first read before
// the daemon's first batch) has no stream time to age its records from.
// They must still be kept a window from the listing: retired at the
// stream's first lap, a listing still in progress (its next page failed,
// or the command was stopped) would resume past them and end complete
// with a hole, since retention reopens complete listings only.
func TestAListingBeforeAnyStreamTimeKeepsItsRecordsAWindow(t *testing.T) {
	ctx := context.Background()
	s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Retention: 7 * 24 * time.Hour, TombstoneWindow: -1})
	if s.Cursor().TimeUS != 0 {
		t.Fatalf("a new database has stream time %d", s.Cursor().TimeUS)
	}
	// v follows bob (bob is in scope); no feed row holds bob's post.
	mustExec(t, s, `INSERT INTO actors (did) VALUES (?), (?)`, string(did("v")), string(did("bob")))
	mustExec(t, s, `INSERT INTO follows (actor_id, collection_id, rkey, subject_id, rev)
		SELECT (SELECT id FROM actors WHERE did = ?1), ?2, 'f', (SELECT id FROM actors WHERE did = ?3), 'r'`,
		string(did("v")), s.followColls[followNSID], string(did("bob")))
	listedAt := t0.Add(1000 * time.Hour)
	// A post of 30 days before the listing, on its first page.
	rkey := syntax.NewTID(listedAt.Add(-30*24*time.Hour).UnixMicro(), 0).String()
	listed := ListedRecord{RKey: syntax.RecordKey(rkey), CID: "bafypostold",
		Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"old"}`)}
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("bob"), Collection: postNSID,
		Records: []ListedRecord{listed}, To: Listing{Round: 1, Page: 1, Cursor: "c1"}}, listedAt); err != nil {
		t.Fatal(err)
	}
	// The stream starts a minute later and retention runs its first lap.
	apply(t, s, post("carol", "live", listedAt.Add(time.Minute).UnixMicro()))
	settleRetention(t, s)
	// The listing's last page completes it.
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("bob"), Collection: postNSID,
		To: Listing{Round: 1, Page: 2, Complete: true}}, listedAt.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	complete := querySQL[int](t, s, `SELECT complete FROM listings WHERE actor_id = (SELECT id FROM actors WHERE did = ?)`, string(did("bob")))
	if got := storedRKeys(t, s, "records"); !slices.Contains(got, rkey) || complete != 1 {
		t.Fatalf("records = %v, listing complete = %d: want %q kept and the listing complete", got, complete, rkey)
	}
}
