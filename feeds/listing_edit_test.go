package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// An edit the stream missed (in a gap, or while the account was out of
// scope) is taken from a listing fetched after the stored copy was
// written: the record's body and CID become the PDS's, the record cache
// forgets the old copy, and the revision stays as it was, so the stream's
// own events, replayed or new, still apply over it. Before, a listing only
// refreshed a stored record's time, and the old body stayed for good
// (found by a review). A copy written after the fetch (its revision newer,
// or a notified write read since) is not the listing's to replace.
func TestAListingTakesAnEditTheStreamMissed(t *testing.T) {
	for _, cacheMB := range []int{0, 4} {
		t.Run(fmt.Sprintf("cacheMB=%d", cacheMB), func(t *testing.T) {
			s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true, RecordCacheMB: cacheMB})
			ctx := context.Background()
			newer := post("alice", "a2", 3)
			newer.Rev = syntax.NewTIDFromTime(reconcileAsOf.Add(time.Minute), 0).String() // written after the fetch
			apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "a1", 2), newer, post("alice", "a3", 5))
			// a3 is rewritten by notifyOfUpdate, read after the fetch.
			saved := notifyClock
			notifyClock = reconcileAsOf
			t.Cleanup(func() { notifyClock = saved })
			if out := notify(t, s, fetched("alice", "a3", str("notified"))); out != NotifyWritten {
				t.Fatalf("setup: notified a3: %v", out)
			}
			firstPage(t, s, "v1") // all cached

			edited := func(rkey string) ListedRecord {
				return ListedRecord{RKey: syntax.RecordKey(rkey), CID: "bafyedited" + rkey,
					Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"edited"}`)}
			}
			res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID,
				Records: []ListedRecord{edited("a3"), edited("a2"), edited("a1")}, To: nextPage(t, s, did("alice"), postNSID),
				FetchedAt: reconcileAsOf}, reconcileAsOf)
			if err != nil {
				t.Fatal(err)
			}
			if res.Written != 0 || res.Existing != 3 || res.Edited != 1 {
				t.Errorf("listing result %+v, want all three existing, one edited", res)
			}
			cids := map[string]string{}
			for _, it := range firstPage(t, s, "v1") {
				cids[it.RKey] = it.CID
			}
			if cids["a1"] != "bafyediteda1" {
				t.Errorf("a1 served with CID %q after a listing found it edited, want bafyediteda1", cids["a1"])
			}
			if cids["a2"] != "bafyposta2" {
				t.Errorf("a2, written after the fetch, served with CID %q, want the stream's bafyposta2", cids["a2"])
			}
			if cids["a3"] != "bafynotifiednotified" {
				t.Errorf("a3, notified after the fetch, served with CID %q, want the notified bafynotifiednotified", cids["a3"])
			}

			// The stream still wins: a replay of a1's create changes
			// nothing (its revision is the stored one), and a later update
			// applies.
			if r := apply(t, s, post("alice", "a1", 2)); r.Applied != 0 {
				t.Errorf("a1's replayed create applied: %+v", r)
			}
			later := post("alice", "a1", 4)
			later.Op, later.CID = OpUpdate, "bafylater"
			apply(t, s, later)
			for _, it := range firstPage(t, s, "v1") {
				if it.RKey == "a1" && it.CID != "bafylater" {
					t.Errorf("a1 served with CID %q after a stream update, want bafylater", it.CID)
				}
			}
		})
	}
}
