package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A target dropped from a feed and added back: while it was out, an
// unfollow (and a delete) reached only the feed's other lanes, so the
// re-enabled lane must not serve the unfollowed author's posts.
func TestAReenabledLaneDropsRowsOfAuthorsUnfollowedMeanwhile(t *testing.T) {
	const repostNSID = syntax.NSID("app.bsky.feed.repost")
	both := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}, {Collection: repostNSID, Cap: 200}}}}
	repostsOnly := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: repostNSID, Cap: 200}}}}
	path := t.TempDir() + "/appview.db"
	s := mustOpenAt(t, path, both)
	apply(t, s, follow("v1", "x", "f1", 1), post("x", "p1", 2))
	if got := feedRKeys(t, s, "following", "v1", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Fatalf("feed = %v", got)
	}
	s.Close()

	s = mustOpenAt(t, path, repostsOnly) // the post lane is disabled
	apply(t, s, unfollow("v1", "f1", 3))
	s.Close()

	s = mustOpenAt(t, path, both) // and enabled again
	if got := feedRKeys(t, s, "following", "v1", postNSID); len(got) != 0 {
		t.Errorf("v1's posts lane = %v after v1 unfollowed x", got)
	}
	if n := count(t, s, `SELECT count(*) FROM feed_items fi JOIN records r ON r.id = fi.record_id
		JOIN actors a ON a.id = r.actor_id WHERE a.did = 'did:plc:x'`); n != 0 {
		t.Errorf("%d feed rows of the unfollowed x remain", n)
	}
}

// A feed renamed (or one feed of a follow collection dropped while another
// stays): its viewers view no enabled feed of that follow collection any
// more, so the stream's unfollows of theirs are dropped, while their follow
// listing stays complete. Their first read of the new feed must list their
// follows again rather than trust the stale ones.
func TestAViewerOfARenamedFeedHasItsFollowsListedAgain(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	named := func(name string) []Feed {
		return []Feed{{Name: name, FollowCollection: followNSID, MergeLimit: 100,
			Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	}
	firstRead := func(s *Store, feed string) {
		t.Helper()
		if ok, err := s.ClaimFirstRead(ctx, did("v1"), feed, "me", now, time.Minute); !ok || err != nil {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if _, err := s.CompleteFirstRead(ctx, did("v1"), feed, "me", now); err != nil {
			t.Fatal(err)
		}
	}
	s := mustOpenWith(t, Options{Path: path, Feeds: named("following")})
	s.CheckScope(ctx, []string{string(followNSID), string(postNSID)})
	register(t, s, "v1", "following")
	listFollowsOnce(t, s, "v1", "alice", now)
	apply(t, s, post("alice", "p1", 2))
	firstRead(s, "following")
	if got := feedRKeys(t, s, "following", "v1", postNSID); len(got) != 1 {
		t.Fatalf("feed before = %v", got)
	}
	s.Close()

	s = mustOpenWith(t, Options{Path: path, Feeds: named("home")})
	s.CheckScope(ctx, []string{string(followNSID), string(postNSID)})
	apply(t, s, unfollow("v1", "f1", 5)) // v1 views no enabled feed: dropped
	register(t, s, "v1", "home")
	l, err := s.ReadListing(ctx, did("v1"), followNSID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Complete {
		t.Errorf("v1's follow listing is complete though its unfollows were dropped while it viewed no feed: %+v", l)
	} else if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("v1"), Collection: followNSID,
		To: Listing{Host: "h", Round: l.Round, Page: 1, Complete: true}, FetchedAt: now, Span: &KeySpan{}}, now); err != nil {
		t.Fatal(err)
	}
	firstRead(s, "home")
	if got := feedRKeys(t, s, "home", "v1", postNSID); len(got) != 0 {
		t.Errorf("home feed = %v: v1 unfollowed alice while it viewed no feed", got)
	}
}

// A viewer of a feed no longer configured (renamed, removed) is retired
// like any other: its follows go, as their collection feeds nothing it
// views, and the accounts it alone followed leave the scope. Before, its
// follows stayed for good (the stream no longer touched them), so those
// accounts' records were stored forever.
func TestRetiringAViewerOfARemovedFeedDropsItsFollows(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	named := func(name string) []Feed {
		return []Feed{{Name: name, FollowCollection: followNSID, MergeLimit: 100,
			Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	}
	s := mustOpenWith(t, Options{Path: path, Feeds: named("following")})
	if _, err := s.RegisterViewer(ctx, did("v1"), "following", time.Unix(1_000, 0)); err != nil {
		t.Fatal(err)
	}
	apply(t, s, follow("v1", "carol", "f1", 1), post("carol", "p1", 2))
	s.Close()

	s = mustOpenWith(t, Options{Path: path, Feeds: named("home")})
	if n, err := s.RetireViewers(ctx, time.Unix(100_000, 0), 20*time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("retired %d (%v), want v1", n, err)
	}
	if n := count(t, s, `SELECT count(*) FROM follows`); n != 0 {
		t.Errorf("%d follows of the retired viewer left", n)
	}
	if res := apply(t, s, post("carol", "p2", 5)); res.OutOfScope != 1 {
		t.Errorf("post by an account no viewer follows: %+v, want out of scope", res)
	}
}

// A collection that was a follow collection in an earlier config (its
// lane disabled, its row kept) and is now a target: an account leaving
// the scope has its listings of it reopened like any target's, since its
// records of it are deleted. Before, the disabled lane's follow
// collection kept the listing complete, so a later follower's first read
// trusted it and the account's records of it were never fetched again.
func TestAFormerFollowCollectionNowATargetIsListedAgainAfterLeavingScope(t *testing.T) {
	const exFollow = syntax.NSID("com.example.follow")
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	before := []Feed{{Name: "graph", FollowCollection: exFollow, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	after := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}, {Collection: exFollow, Cap: 200}}}}
	s := mustOpenWith(t, Options{Path: path, Feeds: before})
	s.Close()

	s = mustOpenWith(t, Options{Path: path, Feeds: after})
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "alice", "f1", 1))
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: exFollow,
		Records: []ListedRecord{{RKey: "3aaaaaaaaaaa2", CID: "bafyx1", Value: json.RawMessage(`{"$type":"com.example.follow","subject":"did:plc:bob"}`)}},
		To:      Listing{Host: "h", Round: 1, Page: 1, Complete: true}, FetchedAt: now}, now); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(*) FROM records r JOIN collections c ON c.id = r.collection_id WHERE c.nsid = 'com.example.follow'`); n != 1 {
		t.Fatalf("%d records of alice's listing stored, want 1", n)
	}
	apply(t, s, unfollow("v1", "f1", 2)) // alice leaves the scope: her records go
	if n := count(t, s, `SELECT count(*) FROM records r JOIN collections c ON c.id = r.collection_id WHERE c.nsid = 'com.example.follow'`); n != 0 {
		t.Fatalf("%d records of alice left after she left the scope", n)
	}
	l, err := s.ReadListing(ctx, did("alice"), exFollow)
	if err != nil {
		t.Fatal(err)
	}
	if l.Complete {
		t.Errorf("alice's listing of %s is still complete, her records of it deleted: a later follower's first read skips them", exFollow)
	}
	// A live follow wants her listings; the retry loop must see them due.
	register(t, s, "v2", "following")
	apply(t, s, follow("v2", "alice", "f2", 3))
	due, err := s.DueListings(ctx, now.Add(time.Hour), 6, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(due, ListingKey{Account: did("alice"), Collection: exFollow}) {
		t.Errorf("due listings = %v: alice's %s listing, wanted by a live follow, is never retried", due, exFollow)
	}
}

// An operator's first read (appview backfill) opened under the daemon's
// config, still running when the daemon restarts with a target added to
// the feed: the daemon marks the feed's complete viewers for a rebuild,
// but this viewer's first read is under way, and completing it with the
// command's lanes, from before the change, marked it complete without the
// new target: its backlog was skipped for good. The command's completion
// is refused instead, and the viewer's next read is a first read.
func TestACommandsFirstReadAcrossAConfigChangeDoesNotCompleteTheViewer(t *testing.T) {
	const repostNSID = syntax.NSID("app.bsky.feed.repost")
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	postsOnly := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	both := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}, {Collection: repostNSID, Cap: 200}}}}
	other := []Feed{{Name: "other", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: repostNSID, Cap: 200}}}}
	// The daemon, with another feed over reposts, so they are stored.
	d := mustOpenWith(t, Options{Path: path, Feeds: append(slices.Clone(postsOnly), other...)})
	register(t, d, "v0", "other")
	apply(t, d, follow("v0", "x", "f0", 1), target(repostNSID, "x", "r1", 2))
	d.Close()

	d = mustOpenWith(t, Options{Path: path, Feeds: append(slices.Clone(postsOnly), other...)})
	cmd := mustOpenWith(t, Options{Path: path, Feeds: append(slices.Clone(postsOnly), other...), Existing: true})
	register(t, cmd, "v1", "following")
	if ok, err := cmd.ClaimFirstRead(ctx, did("v1"), "following", "cmd", now, time.Minute); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if _, err := cmd.ApplyListingPage(ctx, &ListingPage{Account: did("v1"), Collection: followNSID,
		Records: []ListedRecord{{RKey: "f1", CID: "bafyf1", Subject: did("x"),
			Value: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q}`, did("x")))}},
		To: Listing{Host: "h", Round: 1, Page: 1, Complete: true}, FetchedAt: now, Span: &KeySpan{}}, now); err != nil {
		t.Fatal(err)
	}
	d.Close()
	// The daemon restarts with reposts added to "following".
	d = mustOpenWith(t, Options{Path: path, Feeds: append(slices.Clone(both), other...)})
	_, err := cmd.CompleteFirstRead(ctx, did("v1"), "following", "cmd", now)
	st, serr := d.RegisterViewer(ctx, did("v1"), "following", now)
	if serr != nil {
		t.Fatal(serr)
	}
	if st.Complete {
		got := feedRKeys(t, d, "following", "v1", repostNSID)
		t.Errorf("v1 completed by the command's old lanes (err %v): reposts lane = %v, its next read is no first read", err, got)
	}
}
