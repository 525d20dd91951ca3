package feeds

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

var reconcileAsOf = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func listed(keys ...string) []ListedRecord {
	var out []ListedRecord
	for _, k := range keys {
		out = append(out, ListedRecord{RKey: syntax.RecordKey(k), CID: "bafyreib2rxk3rh6kzwq",
			Value: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"x"}`)})
	}
	return out
}

// nextPage is the listing state one page on from the stored one.
func nextPage(t *testing.T, s *Store, account syntax.DID, coll syntax.NSID) Listing {
	t.Helper()
	l, err := s.ReadListing(context.Background(), account, coll)
	if err != nil {
		t.Fatal(err)
	}
	l.Page++
	return l
}

// listPosts applies a page of alice's posts fetched at asOf that vouches
// for span.
func listPosts(t *testing.T, s *Store, asOf time.Time, span *KeySpan, keys ...string) ListingResult {
	t.Helper()
	res, err := s.ApplyListingPage(context.Background(), &ListingPage{Account: did("alice"), Collection: postNSID,
		Records: listed(keys...), To: nextPage(t, s, did("alice"), postNSID), FetchedAt: asOf, Span: span}, asOf)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A page whose span covers the whole collection deletes the stored records
// it does not list: they leave the feeds, and a replay of their creates
// changes nothing. A record the stream stored after the page was fetched
// is not the page's to judge, and stays, even from a PDS whose clock lags
// ours by a minute.
func TestAListingSpanDeletesWhatTheRepoNoLongerHas(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "a1", 2), post("alice", "a2", 3))
	lagging := post("alice", "a3", 4)
	lagging.Rev = syntax.NewTIDFromTime(reconcileAsOf.Add(-time.Minute), 0).String()
	apply(t, s, lagging)

	if res := listPosts(t, s, reconcileAsOf, &KeySpan{}, "a1"); res.Removed != 1 {
		t.Errorf("removed %d, want 1 (a2)", res.Removed)
	}
	if got, want := feedRKeys(t, s, "following", "v1", postNSID), []string{"a3", "a1"}; !slices.Equal(got, want) {
		t.Errorf("feed = %v, want %v", got, want)
	}
	if r := apply(t, s, post("alice", "a2", 3)); r.Duplicates != 1 {
		t.Errorf("replayed create of the deleted record: %+v, want a duplicate", r)
	}
	if got := feedRKeys(t, s, "following", "v1", postNSID); slices.Contains(got, "a2") {
		t.Errorf("a replayed create brought a2 back: %v", got)
	}
}

// A span deletes only inside its bounds: From inclusive, Below exclusive.
func TestAListingSpanKeepsWhatLiesOutsideIt(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("v1", "alice", "f1", 1),
		post("alice", "a1", 2), post("alice", "b1", 3), post("alice", "b2", 4), post("alice", "c1", 5))
	res := listPosts(t, s, reconcileAsOf, &KeySpan{From: "b1", Below: "b2"})
	if got, want := feedRKeys(t, s, "following", "v1", postNSID), []string{"c1", "b2", "a1"}; res.Removed != 1 || !slices.Equal(got, want) {
		t.Errorf("removed %d, feed %v; want 1 removed and %v", res.Removed, got, want)
	}
}

// A follow the listing shows gone is an unfollow: its subject's records
// leave the follower's feed.
func TestAListingSpanUnfollowsWhatTheRepoNoLongerFollows(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("v1", "alice", "f1", 1), follow("v1", "bob", "f2", 2),
		post("alice", "a1", 3), post("bob", "b1", 4))
	page := &ListingPage{Account: did("v1"), Collection: followNSID,
		Records: []ListedRecord{{RKey: "f1", Subject: did("alice"), Value: json.RawMessage(`{}`)}},
		To:      nextPage(t, s, did("v1"), followNSID), FetchedAt: reconcileAsOf, Span: &KeySpan{}}
	res, err := s.ApplyListingPage(context.Background(), page, reconcileAsOf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := feedRKeys(t, s, "following", "v1", postNSID), []string{"a1"}; res.Removed != 1 || !slices.Equal(got, want) {
		t.Errorf("removed %d, feed %v; want 1 removed and %v", res.Removed, got, want)
	}
}

// A page that finds the stored listing at or past its own position
// deletes nothing: another run applied it, or got further, from a fetch
// that may be newer than this one.
func TestAStaleListingPageDeletesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead int
	}{{"another run applied the same page", 0}, {"another run got further", 1}} {
		s := MustOpen(t, defaultFeeds)
		ctx := context.Background()
		apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "a1", 2))
		mine := nextPage(t, s, did("alice"), postNSID)
		other := mine
		other.Page += tc.ahead
		// The other run's page, fetched later, lists a2 (new since).
		if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID,
			Records: listed("a1", "a2"), To: other, FetchedAt: reconcileAsOf.Add(time.Minute), Span: &KeySpan{}}, reconcileAsOf); err != nil {
			t.Fatal(err)
		}
		res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID,
			Records: listed("a1"), To: mine, FetchedAt: reconcileAsOf, Span: &KeySpan{}}, reconcileAsOf)
		if err != nil {
			t.Fatal(err)
		}
		if got := feedRKeys(t, s, "following", "v1", postNSID); !res.Stale || res.Removed != 0 || len(got) != 1 {
			t.Errorf("%s: %+v, feed %v; want stale, nothing removed", tc.name, res, got)
		}
		if n := querySQL[int](t, s, `SELECT count(*) FROM records`); n != 2 {
			t.Errorf("%s: %d records stored, want a1 and a2", tc.name, n)
		}
	}
}

// notifyOfUpdate stored a follow read after the listing page was fetched:
// the page does not list it, and must not take it for deleted.
func TestAListingSpanKeepsAWriteNotifiedAfterItsFetch(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds})
	ctx := context.Background()
	if _, err := s.RegisterViewer(ctx, did("v1"), "following", reconcileAsOf); err != nil {
		t.Fatal(err)
	}
	apply(t, s, follow("v1", "alice", "f1", 1))
	n := Notified{RecordKey: RecordKey{DID: did("v1"), Collection: followNSID, RKey: "f2"},
		Present: true, CID: "bafyfollow", Subject: did("bob"), Record: json.RawMessage(`{"subject":"did:plc:bob"}`)}
	before, err := s.LookupRecord(ctx, n.RecordKey, reconcileAsOf.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n.Before = before
	if _, _, err := s.ApplyNotified(ctx, []Notified{n}); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("v1"), Collection: followNSID,
		Records: []ListedRecord{{RKey: "f1", Subject: did("alice"), Value: json.RawMessage(`{}`)}},
		To:      nextPage(t, s, did("v1"), followNSID), FetchedAt: reconcileAsOf, Span: &KeySpan{}}, reconcileAsOf)
	if err != nil {
		t.Fatal(err)
	}
	followees, err := s.Followees(ctx, did("v1"), followNSID)
	if err != nil || res.Removed != 0 || !slices.Contains(followees, did("bob")) {
		t.Errorf("removed %d, followees %v, %v; want the notified follow of bob kept", res.Removed, followees, err)
	}
}

// A record a listing took for deleted that a later listing finds again is
// written again: the tombstone was only an inference. One the stream
// delivered still keeps a listed record out.
func TestALaterListingUndoesAnInferredDelete(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "a1", 2), post("alice", "a2", 3), post("alice", "a3", 4))
	apply(t, s, unpost("alice", "a3", 5)) // a stream delete
	listPosts(t, s, reconcileAsOf, &KeySpan{}, "a1")
	if got := feedRKeys(t, s, "following", "v1", postNSID); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("feed after the first listing = %v", got)
	}
	// A page fetched before the one that inferred the delete cannot undo
	// it.
	if res := listPosts(t, s, reconcileAsOf.Add(-time.Minute), nil, "a2"); res.Written != 0 {
		t.Errorf("a page fetched earlier wrote %d records over the inferred delete", res.Written)
	}
	res := listPosts(t, s, reconcileAsOf.Add(time.Hour), nil, "a1", "a2", "a3")
	if res.Written != 1 {
		t.Errorf("the later listing wrote %d records, want a2 alone (a3's delete came from the stream)", res.Written)
	}
	if n := querySQL[int](t, s, `SELECT count(*) FROM records WHERE rkey = 'a2'`); n != 1 {
		t.Errorf("a2 stored %d times, want once", n)
	}
}

// notifyOfUpdate reads the record after a listing inferred it deleted:
// the notified write wins over the inferred tombstone, as it does over a
// stream tombstone of the same revision.
func TestANotifiedWriteWinsOverAnInferredDelete(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "a1", 2), post("alice", "a2", 3))
	listPosts(t, s, reconcileAsOf, &KeySpan{}, "a1")
	n := fetched("alice", "a2", str("back"))
	before, err := s.LookupRecord(ctx, n.RecordKey, reconcileAsOf.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	n.Before = before
	out, _ := applyNotified(t, s, n)
	if out[0] != NotifyWritten {
		t.Errorf("notified write after an inferred delete: %s, want written", out[0])
	}
	if got := feedRKeys(t, s, "following", "v1", postNSID); !slices.Equal(got, []string{"a2", "a1"}) {
		t.Errorf("feed = %v, want a2 back", got)
	}
}

// A later listing that finds a record an earlier one took for deleted puts
// it back into the feeds the delete took it out of; a follow it finds
// again brings back its followee's records.
func TestAnUndoneDeleteGoesBackIntoFeeds(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	apply(t, s, follow("v1", "alice", "f1", 1), follow("v2", "alice", "f1", 2), follow("v2", "bob", "f2", 3),
		post("alice", "a1", 4), post("alice", "a2", 5), post("bob", "b1", 6))
	listPosts(t, s, reconcileAsOf, &KeySpan{}, "a1")
	follows := func(asOf time.Time, keys ...string) {
		var recs []ListedRecord
		for _, k := range keys {
			subject := map[string]syntax.DID{"f1": did("alice"), "f2": did("bob")}[k]
			recs = append(recs, ListedRecord{RKey: syntax.RecordKey(k), Subject: subject, Value: json.RawMessage(`{}`)})
		}
		if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("v2"), Collection: followNSID, Records: recs,
			To: nextPage(t, s, did("v2"), followNSID), FetchedAt: asOf, Span: &KeySpan{}}, asOf); err != nil {
			t.Fatal(err)
		}
	}
	follows(reconcileAsOf, "f1")
	if got := feedRKeys(t, s, "following", "v2", postNSID); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("v2's feed after the wrong deletes = %v", got)
	}
	later := reconcileAsOf.Add(time.Hour)
	if res := listPosts(t, s, later, nil, "a1", "a2"); res.Restored != 1 {
		t.Errorf("restored %d records, want 1", res.Restored)
	}
	follows(later, "f1", "f2")
	// (A listed record's feed position comes from its key's time; these
	// keys carry none, so only what the feeds hold is compared.)
	for _, v := range []string{"v1", "v2"} {
		want := []string{"a1", "a2"}
		if v == "v2" {
			want = []string{"a1", "a2", "b1"}
		}
		got := feedRKeys(t, s, "following", v, postNSID)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s's feed after the later listing = %v, want %v", v, got, want)
		}
	}
}

// A gap reopens every listing, not only the complete ones: a round in
// progress applied its pages before the gap.
func TestAGapReopensListingsInProgress(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	apply(t, s, follow("v1", "alice", "f1", 1))
	mid := nextPage(t, s, did("alice"), postNSID)
	mid.Cursor, mid.LowKey = "a5", "a5"
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID, To: mid}, reconcileAsOf); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordGap(ctx, Gap{Detected: reconcileAsOf, CursorUS: 1, Size: time.Hour}); err != nil {
		t.Fatal(err)
	}
	l, err := s.ReadListing(ctx, did("alice"), postNSID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Round != mid.Round+1 || l.Page != 0 || l.Cursor != "" || l.LowKey != "" {
		t.Errorf("listing after the gap = %+v, want a new round from the start", l)
	}
}
