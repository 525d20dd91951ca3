package feeds

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// An account that leaves the scope takes its stored records with it: its
// deletes and updates are dropped while nobody follows it, so a record
// kept would come back into a later follower's feed deleted or stale.
func TestRecordsOfAnAccountOutOfScopeDoNotComeBack(t *testing.T) {
	s := openViewerMode(t)
	register(t, s, "v1", "following")
	register(t, s, "v2", "following")
	apply(t, s, follow("v1", "carol", "f1", 1), post("carol", "p1", 2))
	apply(t, s, unfollow("v1", "f1", 3))
	if n := count(t, s, `SELECT count(*) FROM records r JOIN actors a ON a.id = r.actor_id WHERE a.did = 'did:plc:carol'`); n != 0 {
		t.Errorf("carol left scope with %d records stored", n)
	}
	// Dropped: carol is out of scope.
	apply(t, s, unpost("carol", "p1", 4))
	apply(t, s, follow("v2", "carol", "f2", 5))
	if got := feedRKeys(t, s, "following", "v2", postNSID); len(got) != 0 {
		t.Errorf("v2's feed = %v: carol's post deleted while out of scope came back", got)
	}
	// Back in scope, carol's posts are stored and fanned out again.
	apply(t, s, post("carol", "p2", 6))
	if got := feedRKeys(t, s, "following", "v2", postNSID); !slices.Equal(got, []string{"p2"}) {
		t.Errorf("v2's feed = %v, want [p2]", got)
	}
}

// A listing page of an account that left the scope while the listing ran
// stores nothing and leaves the listing open: the next follower's first
// read lists the account afresh.
func TestListingOfAnAccountOutOfScopeStoresNothing(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "carol", "f1", 1))
	apply(t, s, unfollow("v1", "f1", 2))
	before, err := s.ReadListing(ctx, did("carol"), postNSID)
	if err != nil {
		t.Fatal(err)
	}
	page := &ListingPage{
		Account: did("carol"), Collection: postNSID,
		Records: []ListedRecord{{RKey: "3l2aaaaaaaaa2", CID: "bafyreib2rxk3rh6kzwq", Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"x"}`)}},
		To:      Listing{Round: before.Round, Page: 1, Fetched: 1, Complete: true},
	}
	res, err := s.ApplyListingPage(ctx, page, now)
	if err != nil {
		t.Fatal(err)
	}
	if !res.NotFollowed || res.Written != 0 {
		t.Errorf("result %+v, want NotFollowed and nothing written", res)
	}
	if n := count(t, s, `SELECT count(*) FROM records`); n != 0 {
		t.Errorf("%d records stored for an account out of scope", n)
	}
	after, err := s.ReadListing(ctx, did("carol"), postNSID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Complete || after != before {
		t.Errorf("listing %+v, want it left as %+v", after, before)
	}
}

// A listing run that fails after its listing was reopened (the account
// left the scope meanwhile) does not write its older position back.
func TestAFailedListingNeverMovesItsCursorBack(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "carol", "f1", 1))
	deep := Listing{Round: 1, Page: 2, Cursor: "deep", Fetched: 200}
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("carol"), Collection: postNSID, To: deep}, now); err != nil {
		t.Fatal(err)
	}
	apply(t, s, unfollow("v1", "f1", 2)) // reopens the listing: round 2, no cursor
	failed := deep
	failed.Attempts, failed.LastError = 1, "timeout"
	if err := s.FailListing(ctx, did("carol"), postNSID, failed, now); err != nil {
		t.Fatal(err)
	}
	l, err := s.ReadListing(ctx, did("carol"), postNSID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Round != 2 || l.Cursor != "" || l.Page != 0 {
		t.Errorf("listing %+v, want round 2 from the start", l)
	}

	// A failure at the stored position is recorded.
	at := l
	at.Attempts, at.LastError = 1, "timeout"
	if err := s.FailListing(ctx, did("carol"), postNSID, at, now); err != nil {
		t.Fatal(err)
	}
	if l, _ = s.ReadListing(ctx, did("carol"), postNSID); l.Attempts != 1 || l.LastError != "timeout" {
		t.Errorf("listing %+v, want the failure recorded", l)
	}
}

// A failed target listing is due again only while someone needs it: an
// account that left the scope waits for its next follower's first read,
// rather than being fetched every retry tick for nobody.
func TestDueListingsAreOfAccountsInScope(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "carol", "f1", 1), follow("v1", "dave", "f2", 2))
	for i, name := range []string{"dave", "carol"} {
		failed := Listing{Attempts: 1, LastError: "timeout", NextRetry: now.Add(time.Duration(i) * time.Second)}
		if err := s.FailListing(ctx, did(name), postNSID, failed, now); err != nil {
			t.Fatal(err)
		}
	}
	due, err := s.DueListings(ctx, now.Add(time.Minute), 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []ListingKey{{did("dave"), postNSID}, {did("carol"), postNSID}}
	if !slices.Equal(due, want) {
		t.Errorf("due %v, want %v (longest overdue first)", due, want)
	}
	apply(t, s, unfollow("v1", "f1", 3))
	if due, _ = s.DueListings(ctx, now.Add(time.Minute), 5, 10); !slices.Equal(due, want[:1]) {
		t.Errorf("due after carol left scope %v, want %v", due, want[:1])
	}
}

// A self-follow puts no account in scope: following yourself never puts
// your records in your feed. Before, it did, and deleting it never took
// the account out again, so its records stayed stored while the stream's
// deletes of them were dropped as out of scope, and a later follower's
// merge brought a deleted post back (found by a review).
func TestASelfFollowPutsNothingInScope(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	register(t, s, "v1", "following")
	register(t, s, "v2", "following")
	apply(t, s, follow("v1", "v1", "self", 1), post("v1", "p1", 2))
	if n := count(t, s, `SELECT count(*) FROM records`); n != 0 {
		t.Errorf("a self-followed account's post was stored (%d records)", n)
	}
	apply(t, s, post("v1", "p2", 3), unfollow("v1", "self", 4))
	s.Close()

	s = mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds}) // the followed cache is empty
	apply(t, s, unpost("v1", "p2", 5), follow("v2", "v1", "f2", 6))
	if got := feedRKeys(t, s, "following", "v2", postNSID); len(got) != 0 {
		t.Errorf("v2's feed = %v: a post deleted while v1 was out of scope came back", got)
	}
}

// A viewer's follow of an account that follows itself marks the account's
// listings wanted, as for any account entering scope: the self-follow (and
// the posts it let in) had put the account in the followed cache without
// wanting them, and the follow found it "known followed" (found by a
// review).
func TestASelfFollowedAccountFollowedLaterIsListed(t *testing.T) {
	for _, self := range []bool{false, true} {
		s := openViewerMode(t)
		register(t, s, "v1", "following")
		register(t, s, "v2", "following")
		if self {
			apply(t, s, follow("v1", "v1", "self", 1), post("v1", "p1", 2))
		}
		apply(t, s, follow("v2", "v1", "f2", 5))
		due, err := s.DueListings(t.Context(), time.Unix(1<<33, 0), 10, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(due) != 1 || due[0].Account != did("v1") {
			t.Errorf("self-follow %v: due listings %v, want v1's posts", self, due)
		}
	}
}

// Two feeds over different follow collections and targets: an account
// already followed through one (so in the followed cache) and then
// followed through the other must have the other feed's target listing
// wanted, as for any account entering a follow graph.
func TestAFollowThroughASecondFollowCollectionWantsItsListings(t *testing.T) {
	const subNSID = syntax.NSID("com.example.graph.subscribe")
	const articleNSID = syntax.NSID("com.example.article")
	feeds := []Feed{
		{Name: "following", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}},
		{Name: "subs", FollowCollection: subNSID, MergeLimit: 100, Targets: []Target{{Collection: articleNSID, Cap: 200}}},
	}
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: feeds})
	register(t, s, "v1", "following")
	register(t, s, "v2", "subs")
	apply(t, s, follow("v1", "x", "f1", 1))
	sub := follow("v2", "x", "s1", 2)
	sub.Collection = subNSID
	apply(t, s, sub)

	due, err := s.DueListings(t.Context(), time.Unix(1<<33, 0), 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := ListingKey{did("x"), articleNSID}
	if !slices.Contains(due, want) {
		t.Errorf("due listings %v: x's %s listing, wanted by v2's subscription, is not due", due, articleNSID)
	}
}
