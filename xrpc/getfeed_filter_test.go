package xrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// filterStore is a real store in which alice follows bob, who wrote 24
// posts a minute apart from 2024-01-01T00:00Z: post i is in English when
// i%4 == 0, in Portuguese and English when i%4 == 1, in Portuguese
// otherwise, and only the five oldest (i < 5) are in English at all when
// bottomOnly is set.
func filterStore(t *testing.T, bottomOnly bool) *feeds.Store {
	t.Helper()
	ctx := context.Background()
	s, err := feeds.Open(ctx, feeds.Options{
		Path:     t.TempDir() + "/appview.db",
		IndexAll: true,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: "app.bsky.graph.follow", MergeLimit: 100,
			Targets: []feeds.Target{
				{Collection: posts, Cap: 100, Fields: testFilters[posts]},
				{Collection: reposts, Cap: 100, Fields: testFilters[reposts]},
			}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	changes := []feeds.Change{{
		DID: alice, Collection: "app.bsky.graph.follow", RKey: "3kfollow0000a", Op: feeds.OpCreate,
		Rev: "3kfollow0000a", CID: "bafyfollow", Subject: bob, TimeUS: base.UnixMicro(),
		Record: json.RawMessage(fmt.Sprintf(`{"subject":%q}`, bob)),
	}}
	for i := range 24 {
		at := base.Add(time.Duration(i+1) * time.Minute)
		langs := []string{"pt"}
		switch {
		case bottomOnly && i < 5, !bottomOnly && i%4 == 0:
			langs = []string{"en"}
		case !bottomOnly && i%4 == 1:
			langs = []string{"pt", "en"}
		}
		l, _ := json.Marshal(langs)
		rkey := string(syntax.NewTID(at.UnixMicro(), 0))
		changes = append(changes, feeds.Change{
			DID: bob, Collection: posts, RKey: syntax.RecordKey(rkey), Op: feeds.OpCreate,
			Rev: rkey, CID: "bafypost", TimeUS: at.UnixMicro(), CreatedAtUS: at.UnixMicro(),
			Record: json.RawMessage(fmt.Sprintf(`{"text":"post %d","createdAt":%q,"langs":%s}`, i, at.Format(time.RFC3339), l)),
		})
	}
	if _, err := s.ApplyBatch(ctx, &feeds.Batch{Changes: changes, Cursor: feeds.StreamCursor{TimeUS: base.Add(time.Hour).UnixMicro()}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// pageAll follows cursors to the end and returns each page's post numbers.
func pageAll(t *testing.T, base string, q url.Values) [][]int {
	t.Helper()
	var pages [][]int
	for range 100 {
		res := do(t, http.MethodGet, base+getFeedURL+"?"+q.Encode())
		if res.Status != http.StatusOK {
			t.Fatalf("status %d: %s", res.Status, res.Body)
		}
		var out struct {
			Records []struct {
				Value struct {
					Text string `json:"text"`
				} `json:"value"`
			} `json:"records"`
			Cursor string `json:"cursor"`
		}
		if err := json.Unmarshal(res.Body, &out); err != nil {
			t.Fatal(err)
		}
		page := []int{}
		for _, r := range out.Records {
			var n int
			fmt.Sscanf(r.Value.Text, "post %d", &n)
			page = append(page, n)
		}
		pages = append(pages, page)
		if out.Cursor == "" {
			return pages
		}
		q.Set("cursor", out.Cursor)
	}
	t.Fatal("no end after 100 pages")
	return nil
}

func flat(pages [][]int) []int { return slices.Concat(pages...) }

func TestGetFeedFilters(t *testing.T) {
	cfg := testConfig(filterStore(t, false))
	base := serve(t, cfg)
	q := func(kv ...string) url.Values {
		v := url.Values{"feed": {"following"}, "actor": {string(alice)}, "limit": {"3"}}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}

	var wantEN, wantPT []int
	for i := 23; i >= 0; i-- {
		if i%4 <= 1 {
			wantEN = append(wantEN, i)
		}
		if i%4 != 0 {
			wantPT = append(wantPT, i)
		}
	}
	if got := flat(pageAll(t, base, q("langs", "en"))); !slices.Equal(got, wantEN) {
		t.Errorf("langs=en: %v, want %v", got, wantEN)
	}
	if got := flat(pageAll(t, base, q("langs", "pt", "limit", "100"))); !slices.Equal(got, wantPT) {
		t.Errorf("langs=pt: %v, want %v", got, wantPT)
	}
	// Post i was created at minute i+1; both bounds are inclusive, and an
	// offset spelling names the same instant.
	got := flat(pageAll(t, base, q("createdAtMin", "2024-01-01T00:05:00Z", "createdAtMax", "2024-01-01T01:10:00+01:00")))
	if want := []int{9, 8, 7, 6, 5, 4}; !slices.Equal(got, want) {
		t.Errorf("createdAt 00:05..00:10: %v, want %v", got, want)
	}
	got = flat(pageAll(t, base, q("createdAtMin", "2024-01-01T00:20:00.000Z")))
	if want := []int{23, 22, 21, 20, 19}; !slices.Equal(got, want) {
		t.Errorf("createdAtMin 00:20: %v, want %v", got, want)
	}
	got = flat(pageAll(t, base, q("createdAtMax", "2024-01-01T00:08:00Z", "langs", "en")))
	if want := []int{5, 4, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("createdAtMax 00:08 and langs=en: %v, want %v", got, want)
	}
	if got := flat(pageAll(t, base, q("langs", "de"))); len(got) != 0 {
		t.Errorf("langs=de: %v", got)
	}
	// Unfiltered reads are untouched by declared fields.
	if got := flat(pageAll(t, base, q("limit", "100"))); len(got) != 24 {
		t.Errorf("unfiltered: %d posts", len(got))
	}
}

// TestGetFeedFilterScanBound: with the scan bound at 6 rows and the only
// matches at the bottom of a 24-post feed, the first pages come back empty
// but with a cursor, and paging on reaches every match, newest first.
func TestGetFeedFilterScanBound(t *testing.T) {
	cfg := testConfig(filterStore(t, true))
	cfg.FilterScanLimit = 6
	base := serve(t, cfg)
	pages := pageAll(t, base, url.Values{"feed": {"following"}, "actor": {string(alice)}, "limit": {"2"}, "langs": {"en"}})
	if got, want := flat(pages), []int{4, 3, 2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("matches %v, want %v (pages %v)", got, want, pages)
	}
	// Rows 23..6 hold no match: three scans of 6 rows come back empty.
	for i := range 3 {
		if len(pages[i]) != 0 {
			t.Fatalf("page %d: %v, want an empty page with a cursor (pages %v)", i, pages[i], pages)
		}
	}
}

// A filter of another collection is refused, as ignoring it would answer
// an unfiltered page to a client that asked for a filter; so is one given
// twice with an empty first value, which was ignored (found by a review).
func TestGetFeedRefusesARepeatedForeignFilter(t *testing.T) {
	base := serve(t, testConfig(newFakeReader()))
	for _, q := range []string{
		"&collection=app.bsky.feed.repost&langs=en",
		"&collection=app.bsky.feed.repost&langs=&langs=en",
		"&collection=app.bsky.feed.repost&createdAtMin=&createdAtMin=2024-01-01T00:00:00Z",
		"&subject=&subject=at://x", // the default collection (posts), a repost filter
	} {
		res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice)+q)
		if res.Status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400; body %s", q, res.Status, res.Body)
		}
	}
}
