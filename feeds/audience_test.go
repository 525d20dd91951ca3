package feeds

import (
	"context"
	"testing"
	"time"
)

// feedRowsOf counts the feed rows a viewer holds over all lanes.
func feedRowsOf(tb testing.TB, s *Store, name string) int {
	return querySQL[int](tb, s, `SELECT count(*) FROM feed_items fi JOIN actors a ON a.id = fi.viewer_id WHERE a.did = ?`, string(did(name)))
}

func register(tb testing.TB, s *Store, name, feed string) {
	tb.Helper()
	if _, err := s.RegisterViewer(context.Background(), did(name), feed, time.Unix(1, 0)); err != nil {
		tb.Fatal(err)
	}
}

// A fresh database stores only viewers' follows, so the fan-out trusts
// them; follow records of an account that views no feed (left by an
// index_all run) bring the per-row check back until they are gone, and
// the stray account never receives a row meanwhile.
func TestFanoutAudienceIsCheckedWhileStrayFollowsExist(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	if !s.audienceImplied {
		t.Fatal("an empty database does not imply the fan-out's audience")
	}
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "alice", "f1", 1), follow("stranger", "alice", "f1", 2))
	if res := apply(t, s, post("alice", "p1", 10)); res.FanoutRows != 1 || feedRowsOf(t, s, "v1") != 1 {
		t.Fatalf("fan-out wrote %d rows (v1 holds %d), want one, to v1", res.FanoutRows, feedRowsOf(t, s, "v1"))
	}
	s.Close()

	// An index_all run stores everyone's follows.
	all := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, IndexAll: true})
	apply(t, all, follow("stranger", "alice", "f1", 3))
	all.Close()

	s = mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	if s.audienceImplied {
		t.Fatal("stray follow records left the audience implied")
	}
	before := feedRowsOf(t, s, "stranger") // merged while index_all ran
	if res := apply(t, s, post("alice", "p2", 11)); res.FanoutRows != 1 || feedRowsOf(t, s, "stranger") != before {
		t.Fatalf("fan-out wrote %d rows, %d to the stranger; want one, none", res.FanoutRows, feedRowsOf(t, s, "stranger")-before)
	}
	register(t, s, "stranger", "following")
	s.Close()

	s = mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	if !s.audienceImplied {
		t.Fatal("once every follower is a viewer the audience is still checked")
	}
}

// Two feeds over one follow collection: a viewer of one is no viewer of
// the other, so the check stays and each feed reaches its own viewers.
func TestFanoutAudienceIsCheckedWhenFeedsShareAFollowCollection(t *testing.T) {
	feeds := []Feed{
		{Name: "posts", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 10}}},
		{Name: "notes", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: noteNSID, Cap: 10}}},
	}
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: feeds})
	if s.audienceImplied {
		t.Fatal("two feeds over one follow collection left the audience implied")
	}
	register(t, s, "v1", "posts")
	register(t, s, "v2", "notes")
	apply(t, s, follow("v1", "alice", "f1", 1), follow("v2", "alice", "f1", 2))
	res := apply(t, s, post("alice", "p1", 10), target(noteNSID, "alice", "n1", 11))
	if res.FanoutRows != 2 || feedRowsOf(t, s, "v1") != 1 || feedRowsOf(t, s, "v2") != 1 {
		t.Fatalf("fan-out wrote %d rows (v1 %d, v2 %d), want one to each", res.FanoutRows, feedRowsOf(t, s, "v1"), feedRowsOf(t, s, "v2"))
	}
}

// A follow listing that finishes after its account stopped viewing (it
// was retired meanwhile) writes nothing: only viewers' follows are stored.
func TestFollowListingOfANonViewerWritesNothing(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds})
	ctx := context.Background()
	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("gone"), Collection: followNSID,
		Records: []ListedRecord{{RKey: "f1", Subject: did("alice")}},
		To:      Listing{Round: 1, Page: 1, Complete: true}}, time.Unix(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !res.NotViewer || res.Written != 0 {
		t.Fatalf("listing result %+v, want NotViewer and nothing written", res)
	}
	if n := querySQL[int](t, s, `SELECT count(*) FROM follows`); n != 0 {
		t.Fatalf("%d follows stored for a non-viewer", n)
	}
	if st, err := s.ReadListing(ctx, did("gone"), followNSID); err != nil || st.Page != 0 {
		t.Fatalf("listing state %+v (%v), want none stored", st, err)
	}

	register(t, s, "v1", "following")
	res, err = s.ApplyListingPage(ctx, &ListingPage{Account: did("v1"), Collection: followNSID,
		Records: []ListedRecord{{RKey: "f1", Subject: did("alice")}},
		To:      Listing{Round: 1, Page: 1, Complete: true}}, time.Unix(2, 0))
	if err != nil || res.NotViewer || res.Written != 1 {
		t.Fatalf("a viewer's listing: %+v (%v), want one follow written", res, err)
	}
}
