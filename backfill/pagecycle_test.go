package backfill

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/pds/pdstest"
)

// A PDS answering the viewer's follow listing with its first page again
// and again, its cursor alternating "A" and "B", was read to the
// listing's limit (MaxFollows, 10,000 records): 5,000 requests and as
// many page writes for a viewer who follows one account, since only a
// cursor equal to the one sent was caught and a follow listing reads past
// short pages (a review). The round now ends at the first page that lists
// nothing new, counted and logged, and the feed holds what it listed.
func TestAListingThatPagesInCirclesEnds(t *testing.T) {
	w := newWorld(t, Config{})
	w.svc.metrics = NewMetrics(prometheus.NewRegistry()) // before any run
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)
	w.pds.Fail(viewer, followNSID, pdstest.FaultCircleCursor)
	if err := w.svc.Ensure(context.Background(), viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if n := w.pds.Requests(viewer, followNSID); n != 2 {
		t.Fatalf("%d follow listing requests, want 2: the page, and the same page again", n)
	}
	st, err := w.store.ReadListing(context.Background(), viewer, followNSID)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Complete || st.Page != 2 {
		t.Fatalf("listing %+v, want complete after 2 pages", st)
	}
	if got := len(w.page(t, viewer, 10)); got != 1 {
		t.Fatalf("feed has %d items, want alice's post", got)
	}
	if got := testutil.ToFloat64(w.svc.metrics.circles.WithLabelValues("follows")); got != 1 {
		t.Errorf("appview_backfill_listings_in_circles_total{kind=follows} = %v, want 1", got)
	}
}

// Each of the two signs of a PDS paging in circles on its own, and what
// is no such sign: new keys in any order, or a page of records all
// dropped under a new cursor.
func TestPageCycle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pages []struct {
			cursor string
			keys   []string
		}
		circles []bool
	}{
		{"honest, newest first", []struct {
			cursor string
			keys   []string
		}{{"c", []string{"e", "d", "c"}}, {"a", []string{"b", "a"}}}, []bool{false, false}},
		{"oldest first, overlapping by one", []struct {
			cursor string
			keys   []string
		}{{"b", []string{"a", "b"}}, {"d", []string{"b", "c", "d"}}}, []bool{false, false}},
		{"the same records under new cursors", []struct {
			cursor string
			keys   []string
		}{{"1", []string{"b", "a"}}, {"2", []string{"a", "b"}}}, []bool{false, true}},
		{"cursors in a cycle, records all dropped", []struct {
			cursor string
			keys   []string
		}{{"A", nil}, {"B", nil}, {"A", nil}}, []bool{false, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPageCycle()
			for i, p := range tc.pages {
				if got := c.circles(p.cursor, recs(p.keys...)); got != tc.circles[i] {
					t.Errorf("page %d (cursor %q, keys %v): circles %v, want %v", i+1, p.cursor, p.keys, got, tc.circles[i])
				}
			}
		})
	}
}
