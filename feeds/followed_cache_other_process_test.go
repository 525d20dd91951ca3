package feeds

import (
	"context"
	"testing"
	"time"
)

// Another process's commit empties the writer's followed-authors cache:
// an operator's command (a backfill whose follow listing found a follow
// deleted) can take an author's last follow, and the author leaves scope
// in the file. The daemon, still remembering the author as followed,
// stored its posts for nobody and, worse, took a new follow of it for
// one of a followed author: its reopened listings were never wanted, and
// the new follower's backlog hung on an in-memory queue alone (a
// review).
func TestTheFollowedCacheForgetsWhatAnotherProcessUnfollowed(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/appview.db"
	daemon := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	now := time.Unix(1_000, 0)
	for _, v := range []string{"alice", "bob"} {
		if _, err := daemon.RegisterViewer(ctx, did(v), "following", now); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, daemon, follow("alice", "carol", "f1", 1), post("carol", "p1", 2))
	if _, err := daemon.ApplyListingPage(ctx, &ListingPage{Account: did("carol"), Collection: postNSID,
		Records: listed("3aaaaaaaaaaa2"), To: Listing{Round: 1, Page: 1, Complete: true}}, now); err != nil {
		t.Fatal(err)
	}
	carolWanted := func() int {
		return count(t, daemon, `SELECT count(*) FROM listings l JOIN actors a ON a.id = l.actor_id
			WHERE a.did = 'did:plc:carol' AND l.next_retry_us > 0`)
	}
	if n := carolWanted(); n != 0 {
		t.Fatalf("setup: %d of carol's listings due", n)
	}

	other := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, Existing: true})
	apply(t, other, unfollow("alice", "f1", 3))
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}

	if res := apply(t, daemon, post("carol", "p2", 4)); res.OutOfScope != 1 {
		t.Errorf("carol's post after her last follower left, in another process: %+v, want it out of scope", res)
	}
	apply(t, daemon, follow("bob", "carol", "f2", 5))
	if carolWanted() == 0 {
		t.Error("bob's follow of carol did not want her listings: the daemon still took her for followed")
	}
}
