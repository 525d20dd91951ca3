package backfill

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// The daemon was down past the stream's window: a viewer unfollowed bob,
// alice deleted a post, and neither delete reached us. The gap's rebuild
// lists both again, and what the PDSes no longer have leaves the store
// and the feed; a rebuild that only added would show them for good.
func TestAGapRebuildDropsWhatWasDeletedDuringIt(t *testing.T) {
	// Ten minutes: the viewer's last read is recent enough for this
	// process to remember it complete, which the gap must undo (a review
	// found it answered from memory, unrebuilt, for up to an hour).
	for _, readBefore := range []time.Duration{time.Hour, 10 * time.Minute} {
		t.Run(fmt.Sprint("read ", readBefore, " before"), func(t *testing.T) {
			gapRebuildDropsWhatWasDeletedDuringIt(t, readBefore)
		})
	}
}

func gapRebuildDropsWhatWasDeletedDuringIt(t *testing.T, readBefore time.Duration) {
	w := newWorld(t, Config{})
	viewer, alice, bob := w.account("viewer"), w.account("alice"), w.account("bob")
	w.follow(viewer, alice, 1)
	unfollow := w.follow(viewer, bob, 2)
	keep := w.post(alice, 10)
	gone := w.post(alice, 11)
	w.post(bob, 12)
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, viewer, 50); len(got) != 3 {
		t.Fatalf("before the gap the feed is %v, want 3 posts", got)
	}

	w.pds.DeleteRecord(viewer, followNSID, unfollow)
	w.pds.DeleteRecord(alice, postNSID, gone)
	w.advance(readBefore)
	if _, err := w.store.RecordGap(ctx, feeds.Gap{Detected: w.clock, CursorUS: 1, Size: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	want := []string{string(alice) + "/" + string(keep)}
	if got := w.page(t, viewer, 50); !slices.Equal(got, want) {
		t.Errorf("after the rebuild the feed is %v, want %v", got, want)
	}
	followees, err := w.store.Followees(ctx, viewer, followNSID)
	if err != nil || !slices.Equal(followees, []syntax.DID{alice}) {
		t.Errorf("followees after the rebuild = %v, %v; want only alice", followees, err)
	}
}

// Follows deleted on the PDS fall between the keys pages list: keys[149]
// between page 1's lowest (keys[150]) and page 2's highest (keys[148]),
// keys[0] under the last page's lowest (keys[1]). The spans of the pages
// meet, and the empty page that ends the listing reaches the bottom, so
// both are found; nothing else is deleted.
func TestUnfollowsBetweenAndBelowPagesAreFound(t *testing.T) {
	w := newWorld(t, Config{})
	viewer, keys := listedFollows(t, w, 250)
	ctx := context.Background()
	for _, i := range []int{149, 0} {
		w.pds.DeleteRecord(viewer, followNSID, syntax.RecordKey(keys[i]))
	}
	w.advance(time.Hour)
	if _, err := w.store.RecordGap(ctx, feeds.Gap{Detected: w.clock, CursorUS: 1, Size: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.ensureListing(ctx, viewer, followNSID, 10_000, "follows"); err != nil {
		t.Fatal(err)
	}
	stored, err := w.store.Followees(ctx, viewer, followNSID)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 248 {
		t.Errorf("%d follows stored after the relisting, want 248", len(stored))
	}
	for _, i := range []int{149, 0} {
		if slices.Contains(stored, did(fmt.Sprint("acct", i))) {
			t.Errorf("follow of acct%d deleted on the PDS is still stored", i)
		}
	}
}

// A PDS that answers short pages with a cursor (it caps its pages under
// what we ask) has not reached its end: nothing under such a page is
// taken for deleted. The follow listing reads on to the end; a post
// listing stops there, and vouches only for the keys it saw.
func TestAPDSThatCapsItsPagesLosesNothing(t *testing.T) {
	w := newWorld(t, Config{Depth: 100})
	viewer, alice := w.account("viewer"), w.account("alice")
	for i := range 120 {
		w.follow(viewer, did(fmt.Sprint("acct", i)), i)
	}
	w.follow(viewer, alice, 200)
	for i := range 100 {
		w.post(alice, 1000+i)
	}
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	w.gate.Store(func(r *http.Request) {
		q := r.URL.Query()
		if q.Get("limit") != "" {
			q.Set("limit", "50")
			r.URL.RawQuery = q.Encode()
		}
	})
	w.advance(time.Hour)
	if _, err := w.store.RecordGap(ctx, feeds.Gap{Detected: w.clock, CursorUS: 1, Size: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if stored, _ := w.store.Followees(ctx, viewer, followNSID); len(stored) != 121 {
		t.Errorf("%d follows stored after a relisting in capped pages, want 121", len(stored))
	}
	if got := w.page(t, viewer, 100); len(got) != 100 {
		t.Errorf("%d posts in the feed after a relisting in capped pages, want 100", len(got))
	}
}

// The PDS now drops alice's post at the bottom of the first page (an
// invalid record): the next page must not vouch for its key, which lies
// above the next page's keys.
func TestARecordDroppedAtTheEndOfAPageIsNotDeletedByTheNext(t *testing.T) {
	w := newWorld(t, Config{Depth: 1000})
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, alice, 1)
	for i := range 150 {
		w.post(alice, 1000+i)
	}
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	// Newest first: page 1 lists posts 1149…1050; 1050 is its lowest.
	w.pds.AddRecord(alice, postNSID, tid(1050), `{"$type":"app.bsky.feed.like","subject":"x"}`)
	w.advance(time.Hour)
	if _, err := w.store.RecordGap(ctx, feeds.Gap{Detected: w.clock, CursorUS: 1, Size: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, viewer, 100); len(got) != 100 {
		t.Fatalf("first page has %d posts", len(got))
	}
	if c, err := w.store.Counts(ctx); err != nil || c.Targets != 150 {
		t.Errorf("%d records stored after the relisting (%v), want all 150", c.Targets, err)
	}
}

// A PDS page that drops a record it could not parse cannot vouch for its
// span: nothing in it is deleted.
func TestAPageWithAnUnreadableRecordDeletesNothing(t *testing.T) {
	w := newWorld(t, Config{})
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)
	gone := w.post(alice, 11)
	ctx := context.Background()
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	w.pds.DeleteRecord(alice, postNSID, gone)
	// A record the listing drops (its value is not an object).
	w.pds.AddRecord(alice, postNSID, tid(12), `"not a record"`)
	if _, err := w.store.RecordGap(ctx, feeds.Gap{Detected: w.clock, CursorUS: 1, Size: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, viewer, 50); len(got) != 2 {
		t.Errorf("feed after a relisting with a dropped record = %v, want both stored posts kept", got)
	}
}

// listedFollows makes a viewer following n accounts (acct0…), registers
// it and lists its follows; keys are the follows' record keys, oldest
// first.
func listedFollows(t *testing.T, w *world, n int) (syntax.DID, []string) {
	t.Helper()
	viewer := w.account("viewer")
	var keys []string
	for i := range n {
		keys = append(keys, string(w.follow(viewer, did(fmt.Sprint("acct", i)), i)))
	}
	ctx := context.Background()
	if _, err := w.store.RegisterViewer(ctx, viewer, "following", w.clock); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.ensureListing(ctx, viewer, followNSID, 10_000, "follows"); err != nil {
		t.Fatal(err)
	}
	return viewer, keys
}

// recs is listed records with the given keys and nothing else.
func recs(keys ...string) []feeds.ListedRecord {
	var out []feeds.ListedRecord
	for _, k := range keys {
		out = append(out, feeds.ListedRecord{RKey: syntax.RecordKey(k)})
	}
	return out
}

func TestPageSpan(t *testing.T) {
	for _, tc := range []struct {
		name       string
		records    []feeds.ListedRecord
		above      string
		aboveKnown bool
		ended      bool
		want       *feeds.KeySpan
	}{
		{"first page", recs("c", "b"), "", true, false, &feeds.KeySpan{From: "b"}},
		{"first and last page", recs("c", "b"), "", true, true, &feeds.KeySpan{}},
		{"empty repo", nil, "", true, true, &feeds.KeySpan{}},
		{"middle page", recs("c", "b"), "d", true, false, &feeds.KeySpan{From: "b", Below: "d"}},
		{"last page", recs("c", "b"), "d", true, true, &feeds.KeySpan{Below: "d"}},
		{"empty last page", nil, "d", true, true, &feeds.KeySpan{Below: "d"}},
		{"resumed round", recs("c", "b"), "", false, false, &feeds.KeySpan{From: "b", Below: "c\x00"}},
		{"resumed round, empty page", nil, "", false, true, nil},
		{"out of order", recs("b", "c"), "", true, false, nil},
		{"repeated key", recs("c", "c"), "", true, false, nil},
		{"overlaps the page before", recs("d", "b"), "d", true, false, nil},
	} {
		got := pageSpan(tc.records, tc.above, tc.aboveKnown, tc.ended)
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%s: pageSpan = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The follow listing is interrupted before the empty page that confirms
// its end: the resumed run's first page is that empty page, and it still
// reaches the bottom, from the stored lowest key of the page before, so an
// unfollow of the oldest follow is found.
func TestAResumedRoundStillVouchesForTheBottom(t *testing.T) {
	w := newWorld(t, Config{})
	viewer, keys := listedFollows(t, w, 150)
	ctx := context.Background()
	w.pds.DeleteRecord(viewer, followNSID, syntax.RecordKey(keys[0]))
	w.advance(time.Hour)
	if _, err := w.store.RecordGap(ctx, feeds.Gap{Detected: w.clock, CursorUS: 1, Size: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Pages of 100 and 49 answer; the third request, for the empty page,
	// is cut off by a stop.
	runCtx, cancel := context.WithCancel(ctx)
	var asked atomic.Int32
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") == string(viewer) && asked.Add(1) == 3 {
			cancel()
			<-r.Context().Done()
		}
	})
	if err := w.svc.ensureListing(runCtx, viewer, followNSID, 10_000, "follows"); err == nil {
		t.Fatal("the interrupted listing reported success")
	}
	w.gate.Store(func(*http.Request) {})
	if err := w.svc.ensureListing(ctx, viewer, followNSID, 10_000, "follows"); err != nil {
		t.Fatal(err)
	}
	stored, err := w.store.Followees(ctx, viewer, followNSID)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 149 || slices.Contains(stored, did("acct0")) {
		t.Errorf("%d follows stored after the resumed round, acct0 among them: %v; want 149 without it",
			len(stored), slices.Contains(stored, did("acct0")))
	}
}
