package feeds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var filterFields = []Field{
	{Name: "langs", Path: "langs", Kind: FieldEquality},
	{Name: "createdAt", Path: "createdAt", Kind: FieldDatetime},
}

func filterFeeds(fields ...Field) []Feed { return filterFeedsCap(1000, fields...) }

func filterFeedsCap(cap int, fields ...Field) []Feed {
	return []Feed{{
		Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: cap, Fields: fields}},
	}}
}

// langPost is a post created at minute n of 2024-01-01 in the given languages.
func langPost(author, rkey string, n int64, langs ...string) Change {
	c := post(author, rkey, n)
	created := time.Date(2024, 1, 1, 0, int(n), 0, 0, time.UTC).Format(time.RFC3339)
	l, _ := json.Marshal(langs)
	c.Record = json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":%q,"createdAt":%q,"langs":%s}`, rkey, created, l))
	return c
}

func minute(n int) int64 { return time.Date(2024, 1, 1, 0, n, 0, 0, time.UTC).UnixMicro() }

// filteredRKeys pages through a filtered feed to its end.
func filteredRKeys(tb testing.TB, s *Store, limit, scan int, filters ...Filter) (rkeys []string, pages int) {
	tb.Helper()
	q := PageQuery{Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: limit, Filters: filters, ScanLimit: scan}
	for {
		p, err := s.ReadFeed(context.Background(), q)
		if err != nil {
			tb.Fatalf("read feed: %v", err)
		}
		pages++
		if scan > 0 && p.Examined > scan {
			tb.Fatalf("page examined %d rows, bound %d", p.Examined, scan)
		}
		for _, it := range p.Items {
			rkeys = append(rkeys, it.RKey)
		}
		if p.Next == nil {
			return rkeys, pages
		}
		q.Before = p.Next
	}
}

func langsFilter(v string) Filter { return Filter{Field: "langs", Equals: v} }

func createdFilter(from, to int64) Filter { return Filter{Field: "createdAt", Min: from, Max: to} }

func TestFilteredPages(t *testing.T) {
	s := MustOpen(t, filterFeeds(filterFields...))
	apply(t, s, follow("alice", "carol", "f1", 1))
	var batch []Change
	var wantEN, wantPT []string
	for i := range 30 {
		rkey := fmt.Sprintf("p%02d", i)
		var langs []string
		switch i % 3 {
		case 0:
			langs = []string{"en"}
		case 1:
			langs = []string{"pt", "en"}
		}
		if slices.Contains(langs, "en") {
			wantEN = append([]string{rkey}, wantEN...)
		}
		if slices.Contains(langs, "pt") {
			wantPT = append([]string{rkey}, wantPT...)
		}
		batch = append(batch, langPost("carol", rkey, int64(10+i), langs...))
	}
	apply(t, s, batch...)

	got, _ := filteredRKeys(t, s, 4, 0, langsFilter("en"))
	if !slices.Equal(got, wantEN) {
		t.Fatalf("langs=en: %v, want %v", got, wantEN)
	}
	got, _ = filteredRKeys(t, s, 100, 0, langsFilter("pt"))
	if !slices.Equal(got, wantPT) {
		t.Fatalf("langs=pt: %v, want %v", got, wantPT)
	}
	if got, _ := filteredRKeys(t, s, 10, 0, langsFilter("de")); len(got) != 0 {
		t.Fatalf("langs=de: %v", got)
	}

	// Range: createdAt in minutes 15..20 inclusive, newest first.
	got, _ = filteredRKeys(t, s, 3, 0, createdFilter(minute(15), minute(20)))
	if want := []string{"p10", "p09", "p08", "p07", "p06", "p05"}; !slices.Equal(got, want) {
		t.Fatalf("createdAt 15..20: %v, want %v", got, want)
	}
	got, _ = filteredRKeys(t, s, 50, 0, createdFilter(minute(37), math.MaxInt64))
	if want := []string{"p29", "p28", "p27"}; !slices.Equal(got, want) {
		t.Fatalf("createdAtMin only: %v, want %v", got, want)
	}
	// Both: an AND.
	got, _ = filteredRKeys(t, s, 50, 0, createdFilter(minute(15), minute(20)), langsFilter("pt"))
	if want := []string{"p10", "p07"}; !slices.Equal(got, want) {
		t.Fatalf("createdAt 15..20 and langs=pt: %v, want %v", got, want)
	}

	// An update re-extracts; a delete takes its values along.
	up := langPost("carol", "p00", 100, "de")
	up.Op, up.Rev = OpUpdate, rev(100)
	apply(t, s, up, unpost("carol", "p03", 101))
	got, _ = filteredRKeys(t, s, 50, 0, langsFilter("de"))
	if !slices.Equal(got, []string{"p00"}) {
		t.Fatalf("after update, langs=de: %v", got)
	}
	got, _ = filteredRKeys(t, s, 50, 0, langsFilter("en"))
	if slices.Contains(got, "p00") || slices.Contains(got, "p03") {
		t.Fatalf("after update and delete, langs=en still has p00 or p03: %v", got)
	}
	var orphans int
	if err := s.writer.QueryRow(`SELECT count(*) FROM record_fields WHERE record_id NOT IN (SELECT id FROM records)`).Scan(&orphans); err != nil || orphans != 0 {
		t.Fatalf("%d orphaned field values (%v)", orphans, err)
	}

	_, err := s.ReadFeed(context.Background(), PageQuery{
		Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: 5,
		Filters: []Filter{{Field: "tags", Equals: "x"}},
	})
	if !errors.Is(err, ErrUnknownField) {
		t.Fatalf("undeclared field: %v, want ErrUnknownField", err)
	}
}

// TestFilteredScanIsBounded: with matches only at the bottom of the feed,
// each request examines at most the bound, returns an empty page with a
// cursor, and paging on still reaches every match in order.
func TestFilteredScanIsBounded(t *testing.T) {
	s := MustOpen(t, filterFeeds(filterFields...))
	apply(t, s, follow("alice", "carol", "f1", 1))
	var batch []Change
	for i := range 40 {
		lang := "pt"
		if i < 3 {
			lang = "en"
		}
		batch = append(batch, langPost("carol", fmt.Sprintf("p%02d", i), int64(10+i), lang))
	}
	apply(t, s, batch...)
	got, pages := filteredRKeys(t, s, 10, 7, langsFilter("en"))
	if want := []string{"p02", "p01", "p00"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// 40 rows at 7 a request: 6 requests, the last one finding the end.
	if pages != 6 {
		t.Fatalf("%d requests, want 6", pages)
	}
	p, err := s.ReadFeed(context.Background(), PageQuery{
		Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: 10,
		Filters: []Filter{langsFilter("en")}, ScanLimit: 7,
	})
	if err != nil || len(p.Items) != 0 || p.Next == nil || p.Examined != 7 {
		t.Fatalf("first page: %d items, next %v, examined %d, %v", len(p.Items), p.Next, p.Examined, err)
	}
}

// TestFieldDeclaredLater: a field declared on a database that already
// holds records is extracted from them by the sweep, in bounded slices;
// a field that leaves the config and comes back is extracted again.
func TestFieldDeclaredLater(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	s := mustOpenAt(t, path, filterFeeds())
	apply(t, s, follow("alice", "carol", "f1", 1))
	var batch []Change
	for i := range 250 {
		batch = append(batch, langPost("carol", fmt.Sprintf("p%04d", i), int64(10+i), "en"))
	}
	apply(t, s, batch...)
	s.Close()

	s = mustOpenAt(t, path, filterFeeds(filterFields...))
	s.backlogSlice = 100
	if n := s.FieldBacklog(); n != 2 {
		t.Fatalf("backlog of %d fields, want 2", n)
	}
	if got, _ := filteredRKeys(t, s, 100, 0, langsFilter("en")); len(got) != 0 {
		t.Fatalf("before the backlog ran: %d matches", len(got))
	}
	ticks := sweepUntilIdle(t, s)
	// 250 records, two fields, at most 100 records a slice: three each.
	if ticks < 6 {
		t.Fatalf("backlog done in %d ticks; slices are not bounded", ticks)
	}
	if n := s.FieldBacklog(); n != 0 {
		t.Fatalf("backlog of %d fields after sweeping", n)
	}
	if got, _ := filteredRKeys(t, s, 100, 0, langsFilter("en")); len(got) != 250 {
		t.Fatalf("after the backlog: %d matches, want all 250", len(got))
	}
	s.Close()

	// The field leaves the config; records stored meanwhile are not extracted.
	s = mustOpenAt(t, path, filterFeeds(filterFields[1]))
	apply(t, s, langPost("carol", "late", 500, "en"))
	s.Close()
	s = mustOpenAt(t, path, filterFeeds(filterFields...))
	if n := s.FieldBacklog(); n != 1 {
		t.Fatalf("backlog of %d fields after re-declaring langs, want 1", n)
	}
	sweepUntilIdle(t, s)
	got, _ := filteredRKeys(t, s, 1, 0, langsFilter("en"))
	if len(got) == 0 || got[0] != "late" {
		t.Fatalf("re-declared field: newest match %v, want late", got[:min(len(got), 1)])
	}
}

func sweepUntilIdle(tb testing.TB, s *Store) int {
	tb.Helper()
	now := time.Unix(1_800_000_000, 0)
	for i := 1; i <= 100; i++ {
		res, err := s.SweepTick(context.Background(), Tick{Now: now})
		if err != nil {
			tb.Fatal(err)
		}
		if !res.Pending {
			return i
		}
	}
	tb.Fatal("sweep still pending after 100 ticks")
	return 0
}

// TestFilterScanPlan: the scan walks the feed_items primary key in page
// order and each condition is a primary-key seek into record_fields; no
// temporary B-tree sorts anything.
func TestFilterScanPlan(t *testing.T) {
	s := MustOpen(t, filterFeeds(filterFields...))
	l := s.laneByKey[laneKey{"following", postNSID}]
	conds, args, err := l.filterSQL([]Filter{langsFilter("en"), createdFilter(0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, 1, l.id, int64(math.MaxInt64), int64(math.MaxInt64), 100)
	text := explain(t, s, fmt.Sprintf(filterScanSQL, conds), args...)
	t.Logf("plan:\n%s", text)
	if !strings.Contains(text, "SEARCH fi USING PRIMARY KEY (viewer_id=? AND target_id=?") ||
		strings.Count(text, "SEARCH rf USING PRIMARY KEY (record_id=? AND field_id=?") != 2 ||
		strings.Contains(text, "TEMP B-TREE") || strings.Contains(text, "SCAN") {
		t.Fatalf("unexpected plan:\n%s", text)
	}
}

// TestListedRecordsGetFields: records a first read lists from a PDS get
// their field values in the transaction that stores them, as stream
// records do.
func TestListedRecordsGetFields(t *testing.T) {
	s := MustOpen(t, filterFeeds(filterFields...))
	ctx := context.Background()
	_, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("carol"), Collection: postNSID, Records: []ListedRecord{
		{RKey: "3aaaaaaaaaaa2", CID: "c", Value: []byte(`{"text":"x","langs":["en","pt"],"createdAt":"2024-01-01T00:00:00Z"}`)},
	}, To: Listing{Round: 1, Page: 1}}, time.Unix(1_800_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.reader.QueryRow(`SELECT count(*) FROM record_fields`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d field values stored (%v), want 3", n, err)
	}
}

// TestFieldBacklogBoundedByBytes: a backlog slice also stops once the
// record bodies it has read reach the byte bound, saving its position at
// the last record it extracted, so large records cannot hold the write
// lock for a whole 1,000-record slice; further slices extract the rest,
// none skipped.
func TestFieldBacklogBoundedByBytes(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	s := mustOpenAt(t, path, filterFeeds())
	apply(t, s, follow("alice", "carol", "f1", 1))
	pad := strings.Repeat("x", 2000)
	var batch []Change
	for i := range 10 {
		c := langPost("carol", fmt.Sprintf("p%02d", i), int64(10+i), "en")
		c.Record = json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":%q,"langs":["en"]}`, pad))
		batch = append(batch, c)
	}
	apply(t, s, batch...)
	s.Close()

	s = mustOpenAt(t, path, filterFeeds(filterFields[0]))
	var ids []int64
	var size int
	rows, err := s.reader.Query(`SELECT id, length(body) FROM records ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id, &size); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil || len(ids) != 10 {
		t.Fatalf("%d records, %v", len(ids), err)
	}
	// Every body is the same size: the third one read reaches the bound.
	s.backlogBytes = 2*size + 1
	if _, err := s.SweepTick(context.Background(), Tick{Now: time.Unix(1_800_000_000, 0)}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(DISTINCT record_id) FROM record_fields`); n != 3 {
		t.Fatalf("one slice extracted %d records, want 3 (byte bound %d, bodies of %d)", n, s.backlogBytes, size)
	}
	if after := count(t, s, `SELECT backlog_after_id FROM record_field_defs`); int64(after) != ids[2] {
		t.Fatalf("backlog_after_id = %d after one slice, want %d (the third record)", after, ids[2])
	}
	if ticks := sweepUntilIdle(t, s); ticks < 3 {
		t.Fatalf("rest of the backlog done in %d ticks, want 3 (3, 3, 1 records)", ticks)
	}
	if n := s.FieldBacklog(); n != 0 {
		t.Fatalf("backlog of %d fields after sweeping", n)
	}
	if n := count(t, s, `SELECT count(DISTINCT record_id) FROM record_fields`); n != 10 {
		t.Fatalf("%d records extracted, want all 10", n)
	}
	if got, _ := filteredRKeys(t, s, 100, 0, langsFilter("en")); len(got) != 10 {
		t.Fatalf("after the backlog: %d matches, want all 10", len(got))
	}
}
