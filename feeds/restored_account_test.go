package feeds

import (
	"context"
	"slices"
	"testing"
	"time"
)

// A deleted account that comes back is rebuilt: its deletion removed its
// listings, its follows and its feeds, and no first read or live follow
// would ask for them again. Its target listings are due at once, so the
// retry loop lists its posts for the viewers who kept following it, and
// as a viewer its next read is a first read again, which lists its
// follows. (Left as found by the tenth session's review: its old posts
// never came back, and its own feed stayed empty.)
func TestARestoredAccountIsListedAndRebuilt(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1<<33, 0)
	register(t, s, "v1", "following")
	register(t, s, "dave", "following")
	apply(t, s, follow("v1", "dave", "f1", 1), follow("dave", "bob", "df1", 2))
	for _, v := range []string{"v1", "dave"} {
		if ok, err := s.ClaimFirstRead(ctx, did(v), "following", "run", now, time.Minute); !ok || err != nil {
			t.Fatalf("claim %s's first read: %v %v", v, ok, err)
		}
		if _, err := s.CompleteFirstRead(ctx, did(v), "following", "run", now); err != nil {
			t.Fatal(err)
		}
	}
	// Dave's posts were listed: the listing is complete, nothing is due.
	at := Listing{Host: "https://pds.test", Round: 1, Page: 1, Complete: true, Fetched: 1}
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("dave"), Collection: postNSID,
		Records: listed("d1"), To: at, FetchedAt: now}, now); err != nil {
		t.Fatal(err)
	}
	daveDue := func() bool {
		t.Helper()
		keys, err := s.DueListings(ctx, now, 10, 10)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(keys, ListingKey{did("dave"), postNSID})
	}
	if daveDue() {
		t.Fatal("setup: dave's complete listing is due")
	}

	for _, a := range []AccountStatus{
		{DID: did("dave"), Status: "deleted", TimeUS: 3},
		{DID: did("dave"), Active: true, TimeUS: 4},
	} {
		if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{a}, Cursor: StreamCursor{TimeUS: a.TimeUS}}); err != nil {
			t.Fatal(err)
		}
	}
	if !daveDue() {
		t.Error("dave's posts are not due for listing after he was restored")
	}
	if _, complete, err := s.StoredViewer(ctx, did("dave"), "following"); err != nil || complete {
		t.Errorf("restored dave as a viewer: complete %v (%v), want a first read again", complete, err)
	}
	if _, complete, err := s.StoredViewer(ctx, did("v1"), "following"); err != nil || !complete {
		t.Errorf("v1, who follows dave: complete %v (%v), want it left complete", complete, err)
	}

	// An account that was only deactivated keeps all of that: nothing to
	// list again, no first read.
	for _, a := range []AccountStatus{
		{DID: did("v1"), Status: "deactivated", TimeUS: 5},
		{DID: did("v1"), Active: true, TimeUS: 6},
	} {
		if _, err := s.ApplyBatch(ctx, &Batch{Accounts: []AccountStatus{a}, Cursor: StreamCursor{TimeUS: a.TimeUS}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, complete, err := s.StoredViewer(ctx, did("v1"), "following"); err != nil || !complete {
		t.Errorf("v1 after a deactivation and back: complete %v (%v), want it left complete", complete, err)
	}
}
