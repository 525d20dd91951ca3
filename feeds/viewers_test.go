package feeds

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

func openViewerMode(t *testing.T) *Store {
	t.Helper()
	return mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds})
}

func TestViewerModeStoresOnlyWhatViewersNeed(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	if _, err := s.RegisterViewer(ctx, did("alice"), "following", now); err != nil {
		t.Fatal(err)
	}
	res := apply(t, s,
		follow("alice", "carol", "f1", 1), // a viewer's follow: stored
		follow("bob", "carol", "f2", 2),   // bob never read: skipped
		post("carol", "p1", 3),            // followed by a viewer: stored, fanned out to alice
		post("erin", "p2", 4),             // followed by nobody who reads: skipped
	)
	if res.Applied != 2 || res.OutOfScope != 2 {
		t.Fatalf("result %+v, want 2 applied and 2 out of scope", res)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Errorf("alice = %v", got)
	}
	if n := count(t, s, `SELECT count(*) FROM actors WHERE did IN ('did:plc:bob', 'did:plc:erin')`); n != 0 {
		t.Errorf("out-of-scope accounts were interned: %d", n)
	}
}

func TestFirstReadClaimIsExclusiveAndTakenOverAfterTheLease(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	s.RegisterViewer(ctx, did("alice"), "following", now)
	if ok, err := s.ClaimFirstRead(ctx, did("alice"), "following", "a", now, time.Minute); !ok || err != nil {
		t.Fatalf("first claim: %v %v", ok, err)
	}
	if ok, _ := s.ClaimFirstRead(ctx, did("alice"), "following", "b", now.Add(30*time.Second), time.Minute); ok {
		t.Fatal("second owner claimed a live lease")
	}
	if ok, _ := s.ClaimFirstRead(ctx, did("alice"), "following", "b", now.Add(2*time.Minute), time.Minute); !ok {
		t.Fatal("expired lease was not taken over")
	}
	if _, err := s.CompleteFirstRead(ctx, did("alice"), "following", "a", now); err != ErrClaimLost {
		t.Fatalf("the old owner completed a run it lost: %v", err)
	}
	if _, err := s.CompleteFirstRead(ctx, did("alice"), "following", "b", now); err != nil {
		t.Fatal(err)
	}
	st, _ := s.RegisterViewer(ctx, did("alice"), "following", now)
	if !st.Complete {
		t.Fatalf("status %+v, want complete", st)
	}
}

func TestCompleteFirstReadBuildsTheFeedToItsCap(t *testing.T) {
	feeds := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 3}}}}
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: feeds})
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	s.RegisterViewer(ctx, did("alice"), "following", now)
	s.ClaimFirstRead(ctx, did("alice"), "following", "me", now, time.Minute)
	// Listing pages: alice's follows (carol twice, dave), then their posts.
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: followNSID, Records: []ListedRecord{
		{RKey: "3aaaaaaaaaaa2", Subject: did("carol"), Value: []byte(`{}`)},
		{RKey: "3aaaaaaaaaab2", Subject: did("carol"), Value: []byte(`{}`)},
		{RKey: "3aaaaaaaaaac2", Subject: did("dave"), Value: []byte(`{}`)},
	}, To: Listing{Round: 1, Page: 1, Complete: true}}, now); err != nil {
		t.Fatal(err)
	}
	for i, author := range []string{"carol", "dave", "carol", "dave", "carol"} {
		if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did(author), Collection: postNSID, Records: []ListedRecord{
			{RKey: syntax.RecordKey("p" + string(rune('a'+i))), CID: "c", Value: []byte(`{"text":"x"}`), CreatedAtUS: int64(100 + i)},
		}, To: Listing{Round: 1, Page: i + 1}}, now); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.CompleteFirstRead(ctx, did("alice"), "following", "me", now)
	if err != nil || n != 3 {
		t.Fatalf("built %d rows (%v), want the cap of 3", n, err)
	}
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"pe", "pd", "pc"}; !slices.Equal(got, want) {
		t.Errorf("feed = %v, want %v", got, want)
	}
}

func TestListingNeverOverwritesWhatJetstreamDelivered(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	s.RegisterViewer(ctx, did("alice"), "following", now)
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "live", 5), unpost("carol", "gone", 6))
	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("carol"), Collection: postNSID, Records: []ListedRecord{
		{RKey: "live", CID: "stale", Value: []byte(`{"text":"stale"}`)},
		{RKey: "gone", CID: "stale", Value: []byte(`{"text":"deleted on jetstream"}`)},
		{RKey: "old", CID: "c", Value: []byte(`{"text":"only on the pds"}`)},
	}, To: Listing{Round: 1, Page: 1}}, now)
	if err != nil || res.Written != 1 || res.Existing != 2 {
		t.Fatalf("result %+v (%v), want only the unknown record written", res, err)
	}
	// A stale run behind the stored position keeps the stored cursor.
	res, err = s.ApplyListingPage(ctx, &ListingPage{Account: did("carol"), Collection: postNSID, To: Listing{Round: 0, Page: 9}}, now)
	if err != nil || !res.Stale {
		t.Fatalf("older round accepted: %+v %v", res, err)
	}
	l, _ := s.ReadListing(ctx, did("carol"), postNSID)
	if l.Round != 1 || l.Page != 1 {
		t.Errorf("listing = %+v", l)
	}
}

func TestRetiredViewerStartsOver(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	s.RegisterViewer(ctx, did("alice"), "following", time.Unix(1_000, 0))
	s.RegisterViewer(ctx, did("bob"), "following", time.Unix(90_000, 0))
	apply(t, s, follow("alice", "carol", "f1", 1), follow("bob", "dave", "f2", 2), post("carol", "p1", 3), post("dave", "p2", 4))
	n, err := s.RetireViewers(ctx, time.Unix(100_000, 0), 20*time.Hour, 10)
	if err != nil || n != 1 {
		t.Fatalf("retired %d (%v), want alice only", n, err)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Errorf("retired viewer still has %v", got)
	}
	if got := feedRKeys(t, s, "following", "bob", postNSID); !slices.Equal(got, []string{"p2"}) {
		t.Errorf("bob = %v", got)
	}
	if n := count(t, s, `SELECT count(*) FROM follows`); n != 1 {
		t.Errorf("%d follows left, want bob's only", n)
	}
	// Carol left the scope: her next post is skipped.
	if res := apply(t, s, post("carol", "p3", 5)); res.OutOfScope != 1 {
		t.Errorf("post by an account nobody follows: %+v", res)
	}
	st, _ := s.RegisterViewer(ctx, did("alice"), "following", time.Unix(100_000, 0))
	if st.Complete {
		t.Error("a returning viewer is complete; its next read must be a first read")
	}
}

// An account that leaves the scope, because its last follower unfollowed
// it or because that follower's account was deleted, has its record
// listings reopened: its records went unstored while out of scope, so a
// later follower's first read must list them again rather than trust a
// complete listing.
func TestLeavingScopeReopensTheAccountsListings(t *testing.T) {
	for _, how := range []string{"unfollow", "follower deleted"} {
		t.Run(how, func(t *testing.T) {
			s := openViewerMode(t)
			ctx := context.Background()
			now := time.Unix(1_000, 0)
			register(t, s, "v1", "following")
			apply(t, s, follow("v1", "carol", "f1", 1))
			done := Listing{Round: 1, Page: 1, Fetched: 1, Complete: true}
			if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("carol"), Collection: postNSID, To: done}, now); err != nil {
				t.Fatal(err)
			}

			batch := &Batch{Cursor: StreamCursor{TimeUS: 2}}
			switch how {
			case "unfollow":
				batch.Changes = []Change{unfollow("v1", "f1", 2)}
			case "follower deleted":
				batch.Accounts = []AccountStatus{{DID: did("v1"), Status: "deleted", TimeUS: 2}}
			}
			if _, err := s.ApplyBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			l, err := s.ReadListing(ctx, did("carol"), postNSID)
			if err != nil {
				t.Fatal(err)
			}
			if l.Complete || l.Round != done.Round+1 {
				t.Errorf("carol's post listing after she left scope: %+v, want reopened in round %d", l, done.Round+1)
			}
		})
	}
}

// A followee's backlog merged after the viewer unfollowed it (the fetch
// ran meanwhile) adds nothing: those rows would belong to no follow, and
// no unfollow or delete would reach them.
func TestMergeFolloweeAfterAnUnfollowAddsNothing(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	register(t, s, "bob", "following")
	register(t, s, "alice", "following")
	apply(t, s, follow("bob", "carol", "f1", 1), post("carol", "p1", 2))
	apply(t, s, follow("alice", "carol", "f2", 3))
	apply(t, s, unfollow("alice", "f2", 4))
	if _, err := s.MergeFollowee(ctx, did("alice"), did("carol"), followNSID); err != nil {
		t.Fatal(err)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Errorf("alice's feed = %v after a merge of an account she unfollowed", got)
	}
	apply(t, s, follow("alice", "carol", "f3", 5))
	if _, err := s.MergeFollowee(ctx, did("alice"), did("carol"), followNSID); err != nil {
		t.Fatal(err)
	}
	if got := feedRKeys(t, s, "following", "alice", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Errorf("alice's feed = %v once she follows carol again, want [p1]", got)
	}
}

// A renewal extends a claim its owner still holds, and takes none that was
// released or taken over meanwhile (ClaimFirstRead would take a released
// one).
func TestRenewingAFirstReadClaimNeverTakesOne(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	register(t, s, "alice", "following")
	if ok, err := s.ClaimFirstRead(ctx, did("alice"), "following", "a", now, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := s.RenewFirstRead(ctx, did("alice"), "following", "a", now.Add(50*time.Second), time.Minute); !ok || err != nil {
		t.Fatalf("renewal of a held claim: %v %v", ok, err)
	}
	if st, _ := s.RegisterViewer(ctx, did("alice"), "following", now); !st.ClaimUntil.Equal(now.Add(110 * time.Second)) {
		t.Errorf("claim until %v, want it extended to %v", st.ClaimUntil, now.Add(110*time.Second))
	}
	if err := s.ReleaseFirstRead(ctx, did("alice"), "following", "a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.RenewFirstRead(ctx, did("alice"), "following", "a", now, time.Minute); ok {
		t.Error("a renewal took a released claim")
	}
	if ok, _ := s.ClaimFirstRead(ctx, did("alice"), "following", "b", now, time.Minute); !ok {
		t.Fatal("b could not claim")
	}
	if ok, _ := s.RenewFirstRead(ctx, did("alice"), "following", "a", now, time.Minute); ok {
		t.Error("a renewal took b's claim")
	}
}

// A first read under way when a gap is recorded cannot complete: the gap
// releases its claim, so the feed it would build from listings the gap
// reopened (here alice's, found complete before it) is not marked
// complete, and the viewer's next read runs again. Before, the run
// completed and the viewer was never rebuilt (found by a review).
func TestAFirstReadUnderWayWhenAGapIsRecordedDoesNotComplete(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := reconcileAsOf
	register(t, s, "w", "following")
	register(t, s, "v", "following")
	apply(t, s, follow("w", "alice", "f1", 1), post("alice", "a1", 2))
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID,
		To: Listing{Host: "h", Round: 1, Page: 1, Complete: true}}, now); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ClaimFirstRead(ctx, did("v"), "following", "me", now, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	apply(t, s, follow("v", "alice", "g1", 4)) // v's follows listed; alice's posts found complete
	if ok, err := s.RecordGap(ctx, Gap{Detected: now, CursorUS: 1, Size: 48 * time.Hour}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := s.CompleteFirstRead(ctx, did("v"), "following", "me", now); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("the run completed across the gap (%v)", err)
	}
	if st, _ := s.RegisterViewer(ctx, did("v"), "following", now); st.Complete {
		t.Fatal("v is complete with a feed built from listings the gap reopened")
	}
	// The next run claims the viewer at once: nothing holds it.
	if ok, err := s.ClaimFirstRead(ctx, did("v"), "following", "next", now, time.Hour); !ok || err != nil {
		t.Fatalf("the next run cannot claim v: %v %v", ok, err)
	}
}

// TouchViewers moves a last-read time forward only, and writes nothing
// for a viewer retired (or never registered) since the read it stands for.
func TestTouchViewersMovesForwardAndLeavesTheRetiredAlone(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	t1 := time.Unix(10_000, 0)
	if _, err := s.RegisterViewer(ctx, did("alice"), "following", t1); err != nil {
		t.Fatal(err)
	}
	lastRead := func() time.Time {
		t.Helper()
		last, _, err := s.StoredViewer(ctx, did("alice"), "following")
		if err != nil {
			t.Fatal(err)
		}
		return last
	}
	touch := func(at time.Time, viewers ...string) {
		t.Helper()
		var ts []ViewerTouch
		for _, v := range viewers {
			ts = append(ts, ViewerTouch{Viewer: did(v), Feed: "following", At: at})
		}
		if err := s.TouchViewers(ctx, ts); err != nil {
			t.Fatal(err)
		}
	}
	touch(t1.Add(-time.Minute), "alice")
	if got := lastRead(); !got.Equal(t1) {
		t.Fatalf("an older touch moved the last read to %v, want %v", got, t1)
	}
	t2 := t1.Add(2 * time.Hour)
	touch(t2, "alice", "nobody")
	if got := lastRead(); !got.Equal(t2) {
		t.Fatalf("last read %v after a touch at %v", got, t2)
	}
	if _, _, err := s.StoredViewer(ctx, did("nobody"), "following"); err != nil || s.KnownViewer(did("nobody"), "following") {
		t.Fatalf("a touch registered an unknown viewer (err %v)", err)
	}
	if n := count(t, s, `SELECT count(*) FROM viewers`); n != 1 {
		t.Fatalf("%d viewer rows after touching an unknown viewer, want 1", n)
	}
}
