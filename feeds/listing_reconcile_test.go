package feeds

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

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

// A page whose span covers the whole collection deletes the stored records
// it does not list: they leave the feeds, and a replay of their creates
// changes nothing. A record the stream stored after the page was fetched
// is not the page's to judge, and stays.
func TestAListingSpanDeletesWhatTheRepoNoLongerHas(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	asOf := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "a1", 2), post("alice", "a2", 3))
	later := post("alice", "a3", 4)
	later.Rev = syntax.NewTIDFromTime(asOf.Add(time.Second), 0).String()
	apply(t, s, later)

	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID,
		Records: listed("a1"), To: nextPage(t, s, did("alice"), postNSID), Span: &KeySpan{AsOf: asOf}}, asOf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 1 {
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
	ctx := context.Background()
	asOf := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	apply(t, s, follow("v1", "alice", "f1", 1),
		post("alice", "a1", 2), post("alice", "b1", 3), post("alice", "b2", 4), post("alice", "c1", 5))
	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID,
		To: nextPage(t, s, did("alice"), postNSID), Span: &KeySpan{From: "b1", Below: "b2", AsOf: asOf}}, asOf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := feedRKeys(t, s, "following", "v1", postNSID), []string{"c1", "b2", "a1"}; res.Removed != 1 || !slices.Equal(got, want) {
		t.Errorf("removed %d, feed %v; want 1 removed and %v", res.Removed, got, want)
	}
}

// A follow the listing shows gone is an unfollow: its subject's records
// leave the follower's feed.
func TestAListingSpanUnfollowsWhatTheRepoNoLongerFollows(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	asOf := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	apply(t, s, follow("v1", "alice", "f1", 1), follow("v1", "bob", "f2", 2),
		post("alice", "a1", 3), post("bob", "b1", 4))
	page := &ListingPage{Account: did("v1"), Collection: followNSID,
		Records: []ListedRecord{{RKey: "f1", Subject: did("alice"), Value: json.RawMessage(`{}`)}},
		To:      nextPage(t, s, did("v1"), followNSID), Span: &KeySpan{AsOf: asOf}}
	res, err := s.ApplyListingPage(ctx, page, asOf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := feedRKeys(t, s, "following", "v1", postNSID), []string{"a1"}; res.Removed != 1 || !slices.Equal(got, want) {
		t.Errorf("removed %d, feed %v; want 1 removed and %v", res.Removed, got, want)
	}
}

// A page that finds the stored listing ahead of it deletes nothing: it was
// fetched before the run that got further, which speaks for the span.
func TestAStaleListingPageDeletesNothing(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	asOf := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "a1", 2))
	stale := nextPage(t, s, did("alice"), postNSID)
	ahead := stale
	ahead.Page++
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID, Records: listed("a1"), To: ahead}, asOf); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID,
		To: stale, Span: &KeySpan{AsOf: asOf}}, asOf)
	if err != nil {
		t.Fatal(err)
	}
	if got := feedRKeys(t, s, "following", "v1", postNSID); !res.Stale || res.Removed != 0 || len(got) != 1 {
		t.Errorf("stale page: %+v, feed %v; want stale, nothing removed, a1 kept", res, got)
	}
}
