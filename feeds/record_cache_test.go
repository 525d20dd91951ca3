package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func firstPage(t *testing.T, s *Store, viewer string) []Item {
	t.Helper()
	p, err := s.ReadFeed(context.Background(), PageQuery{Feed: "following", Viewer: did(viewer), Collection: postNSID, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	return p.Items
}

func TestRecordCacheServesRepeatedPages(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1), follow("bob", "carol", "f2", 2),
		post("carol", "p1", 10), post("carol", "p2", 11))
	first := firstPage(t, s, "alice")
	if entries, _ := s.recordCache.stats(); entries != 2 {
		t.Fatalf("cache holds %d records after one page, want 2", entries)
	}
	// bob's page is served from the cache: the records table is emptied
	// behind the store's back, and the page still shows both posts.
	if _, err := s.writer.Exec(`DELETE FROM records`); err != nil {
		t.Fatal(err)
	}
	second := firstPage(t, s, "bob")
	if len(second) != 2 || len(first) != 2 {
		t.Fatalf("pages: alice %d items, bob %d, want 2 each", len(first), len(second))
	}
	for i := range first {
		a, b := first[i], second[i]
		if a.URI != b.URI || a.CID != b.CID || string(a.Value) != string(b.Value) || a.Key != b.Key {
			t.Errorf("item %d: cached %+v, read %+v", i, b, a)
		}
	}
}

// A cached record is forgotten when a later transaction edits or deletes
// it, whether a page cached it or the writer did at its create (while
// pages were read, recordCache.created).
func TestRecordCacheForgetsUpdatedAndDeletedRecords(t *testing.T) {
	for _, atCreate := range []bool{false, true} {
		t.Run(map[bool]string{false: "cached by a page", true: "cached at its create"}[atCreate], func(t *testing.T) {
			s := MustOpen(t, defaultFeeds)
			apply(t, s, follow("alice", "carol", "f1", 1))
			if atCreate {
				firstPage(t, s, "alice") // pages are read: the create caches p1
			}
			apply(t, s, post("carol", "p1", 10))
			if !atCreate {
				firstPage(t, s, "alice") // caches p1
			}
			if entries, _ := s.recordCache.stats(); entries != 1 {
				t.Fatalf("cache holds %d records, want p1", entries)
			}

			upd := post("carol", "p1", 20)
			upd.Op, upd.CID, upd.Record = OpUpdate, "bafynew", json.RawMessage(`{"text":"edited"}`)
			apply(t, s, upd)
			if items := firstPage(t, s, "alice"); len(items) != 1 || items[0].CID != "bafynew" || string(items[0].Value) != `{"text":"edited"}` {
				t.Fatalf("after update: %+v", items)
			}

			// The page must show p2, and nothing of the deleted p1.
			apply(t, s, unpost("carol", "p1", 30))
			apply(t, s, post("carol", "p2", 31))
			items := firstPage(t, s, "alice")
			if len(items) != 1 || items[0].RKey != "p2" || !strings.HasSuffix(items[0].URI, "/p2") || items[0].CID != "bafypostp2" {
				t.Fatalf("after delete and a new post: %+v", items)
			}
		})
	}
}

// The size gauge follows every change of the cache, a forget included, not
// only the next miss.
func TestRecordCacheSizeGaugeFollowsForgets(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true,
		Metrics: NewMetrics(prometheus.NewRegistry()), RecordCacheMB: 1})
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p1", 10), post("carol", "p2", 11))
	firstPage(t, s, "alice")
	gauge := func() float64 { return testutil.ToFloat64(s.metrics.recordCache.bytes) }
	_, held := s.recordCache.stats()
	if held == 0 || gauge() != float64(held) {
		t.Fatalf("after a fill the gauge shows %v, the cache holds %d bytes", gauge(), held)
	}
	apply(t, s, unpost("carol", "p1", 20), unpost("carol", "p2", 21))
	if _, held := s.recordCache.stats(); held != 0 || gauge() != 0 {
		t.Fatalf("after both records were deleted the gauge shows %v, the cache holds %d bytes", gauge(), held)
	}
}

func TestRecordCacheForgetsADeletedAccount(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1), follow("alice", "dave", "f2", 2),
		post("carol", "p1", 10), post("dave", "d1", 11))
	firstPage(t, s, "alice")
	if entries, _ := s.recordCache.stats(); entries != 2 {
		t.Fatalf("cache holds %d records, want 2", entries)
	}
	batch := &Batch{Accounts: []AccountStatus{{DID: did("carol"), Status: "deleted", TimeUS: 20}}, Cursor: StreamCursor{TimeUS: 20}}
	if _, err := s.ApplyBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if entries, _ := s.recordCache.stats(); entries != 1 {
		t.Errorf("cache holds %d records after one of two accounts was deleted, want 1", entries)
	}
	if items := firstPage(t, s, "alice"); len(items) != 1 || items[0].RKey != "d1" {
		t.Errorf("page after the account was deleted: %+v", items)
	}
}

// A record read on every page survives a stream of records read once,
// which are evicted oldest first: the bound evicts by recency of use, not
// of insertion.
func TestRecordCacheKeepsARecordReadOften(t *testing.T) {
	c := newRecordCache(16 << 10) // about 30 of the records below
	rec := func(id int64) *cachedRecord {
		return &cachedRecord{id: id, did: "did:plc:x", rkey: fmt.Sprint(id), value: make([]byte, 300)}
	}
	c.put(c.snapshot(), []*cachedRecord{rec(0)})
	for id := int64(1); id <= 300; id++ {
		c.put(c.snapshot(), []*cachedRecord{rec(id)})
		if _, ok := c.get(0); !ok {
			t.Fatalf("the record read on every page was evicted after %d others", id)
		}
	}
	if _, ok := c.get(1); ok {
		t.Error("the oldest record read once survived")
	}
	if _, ok := c.get(300); !ok {
		t.Error("the newest record was evicted")
	}
}

// TestPageRaceWithADeleteAndAReusedID deletes the newest post between a
// page's two reads and stores another author's post: the page must not
// show that post under the deleted one's key, and must still lead on to
// the older items. It was written when a deleted record's id could be
// handed out again; since schema 0014 ids are never reused, and it guards
// the same answer.
func TestPageRaceWithADeleteAndAReusedID(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			s := MustOpen(t, defaultFeeds)
			apply(t, s, follow("alice", "carol", "f1", 1), follow("bob", "dave", "f2", 2),
				post("carol", "old", 10), post("carol", "new", 11))
			s.afterPageKeys = func() {
				s.afterPageKeys = nil
				apply(t, s, unpost("carol", "new", 20))
				apply(t, s, post("dave", "other", 21))
				if cached {
					firstPage(t, s, "bob") // caches dave's post
				}
			}
			p, err := s.ReadFeed(context.Background(), PageQuery{Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Items) != 0 {
				t.Fatalf("page shows %+v, want no item: its record was deleted", p.Items)
			}
			if p.Next == nil {
				t.Fatal("page has no cursor: the feed looks over, but an older post remains")
			}
			p, err = s.ReadFeed(context.Background(), PageQuery{Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: 1, Before: p.Next})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Items) != 1 || p.Items[0].RKey != "old" {
				t.Fatalf("next page: %+v, want the old post", p.Items)
			}
		})
	}
}

func TestRecordCacheEvictsToItsBound(t *testing.T) {
	c := newRecordCache(16 << 10)
	var recs []*cachedRecord
	for i := range 100 {
		recs = append(recs, &cachedRecord{id: int64(i), did: "did:plc:x", rkey: fmt.Sprint(i), value: make([]byte, 300)})
	}
	c.put(c.snapshot(), recs)
	entries, bytes := c.stats()
	if bytes > 16<<10 || entries == 0 || entries == 100 {
		t.Fatalf("cache holds %d entries, %d bytes; bound 16384", entries, bytes)
	}
	// The newest survive, the oldest went first.
	if _, ok := c.get(99); !ok {
		t.Error("the last record put was evicted")
	}
	if _, ok := c.get(0); ok {
		t.Error("the first record put survived")
	}
	// An outsized record is not cached at all.
	c.put(c.snapshot(), []*cachedRecord{{id: 1000, value: make([]byte, 4<<10)}})
	if _, ok := c.get(1000); ok {
		t.Error("a record of a quarter of the cache was cached")
	}
}

func TestRecordCacheRefusesRowsReadBeforeAForget(t *testing.T) {
	c := newRecordCache(1 << 20)
	epoch := c.snapshot() // a read starts
	c.changing([]int64{7}).done()
	c.put(epoch, []*cachedRecord{{id: 7, value: []byte(`"old"`)}})
	if _, ok := c.get(7); ok {
		t.Fatal("a record read before the commit that changed it was cached after it")
	}
	c.put(c.snapshot(), []*cachedRecord{{id: 7, value: []byte(`"new"`)}})
	if r, ok := c.get(7); !ok || string(r.value) != `"new"` {
		t.Fatalf("record read after the forget: %v %v", r, ok)
	}
}

// TestRecordCacheUnderConcurrentEdits reads pages while a writer edits
// the posts they show; once the writer is done, every page shows the last
// edit of every post.
func TestRecordCacheUnderConcurrentEdits(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	changes := []Change{follow("alice", "carol", "f1", 1)}
	for i := range 20 {
		changes = append(changes, post("carol", fmt.Sprintf("p%02d", i), int64(10+i)))
	}
	apply(t, s, changes...)
	const rounds = 30
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := s.ReadFeed(context.Background(), PageQuery{Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: 50})
				if err != nil {
					t.Error(err)
					return
				}
				if len(p.Items) != 20 {
					t.Errorf("page of %d items, want 20", len(p.Items))
					return
				}
			}
		})
	}
	for r := 1; r <= rounds; r++ {
		var edits []Change
		for i := range 20 {
			c := post("carol", fmt.Sprintf("p%02d", i), int64(1000*r+i))
			c.Op, c.CID, c.Record = OpUpdate, fmt.Sprintf("bafy%d", r), json.RawMessage(fmt.Sprintf(`{"round":%d}`, r))
			edits = append(edits, c)
		}
		apply(t, s, edits...)
	}
	close(stop)
	wg.Wait()
	for _, it := range firstPage(t, s, "alice") {
		if want := fmt.Sprintf(`{"round":%d}`, rounds); string(it.Value) != want || it.CID != fmt.Sprintf("bafy%d", rounds) {
			t.Errorf("%s shows %s (%s), want %s", it.RKey, it.Value, it.CID, want)
		}
	}
}

// A page read right after a commit, before the record cache is told the
// commit is done, must not show a record the commit deleted: here the
// commit deletes a cached post and stores another with the same sort key.
// (Written when the new post could take the deleted one's id, which the
// page's key could not tell apart; since schema 0014 ids are never
// reused.)
func TestPageBetweenACommitAndItsForgetShowsNoDeletedRecord(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "old", 10))
	if items := firstPage(t, s, "alice"); len(items) != 1 || items[0].RKey != "old" {
		t.Fatalf("first page %+v, want the old post (now cached)", items)
	}
	var during []Item
	s.afterCommit = func() {
		s.afterCommit = nil
		during = firstPage(t, s, "alice")
	}
	replace := post("carol", "new", 10) // same sort key as "old"
	replace.TimeUS = 20
	replace.CreatedAtUS = 10
	apply(t, s, unpost("carol", "old", 20), replace)
	if n := count(t, s, `SELECT count(*) FROM records WHERE rkey = 'new' AND id = (SELECT max(id) FROM records)`); n != 1 {
		t.Fatal("the new post is not the newest record; the test no longer sets up the race")
	}
	if during == nil {
		t.Fatal("no page was read right after the commit")
	}
	if len(during) != 1 || during[0].RKey != "new" {
		t.Errorf("page read right after the commit: %+v, want only the new post", during)
	}
}

// A commit forgets the records it changes before it commits, and while
// it commits the cache serves the others and accepts no fill: neither a
// read begun before it nor one begun during it can put a record back.
func TestRecordCacheForgetsBeforeTheCommitAndServesTheRest(t *testing.T) {
	c := newRecordCache(1 << 20)
	c.put(c.snapshot(), []*cachedRecord{{id: 7, value: []byte(`"old"`)}, {id: 8, value: []byte(`"other"`)}})
	before := c.snapshot() // a read starts before the commit
	ch := c.changing([]int64{7})
	if _, ok := c.get(7); ok {
		t.Fatal("a record the commit changes is served while it commits")
	}
	if r, ok := c.get(8); !ok || string(r.value) != `"other"` {
		t.Fatalf("an unchanged record while a commit runs: %v %v, want it served", r, ok)
	}
	c.put(before, []*cachedRecord{{id: 7, value: []byte(`"old"`)}})
	c.put(c.snapshot(), []*cachedRecord{{id: 7, value: []byte(`"old"`)}})
	ch.done()
	if _, ok := c.get(7); ok {
		t.Fatal("a record read before or during the commit that changed it was cached")
	}
}

// Pages read while a commit that changes records is under way take their
// hits: they used to take none until the commit was done, and at a live
// 1,000 events/s the writer is inside a commit, or a checkpoint it runs,
// for much of each second (docs/benchmarks.md, fifteenth round).
func TestAPageReadDuringACommitTakesItsHits(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true,
		Metrics: NewMetrics(prometheus.NewRegistry()), RecordCacheMB: 1})
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p1", 10), post("carol", "p2", 11),
		follow("bob", "dave", "f2", 2), post("dave", "d1", 12))
	firstPage(t, s, "alice") // caches p1 and p2
	hits := func() float64 { return testutil.ToFloat64(s.metrics.recordCache.hits) }
	misses := func() float64 { return testutil.ToFloat64(s.metrics.recordCache.misses) }
	var during []Item
	var hitsDuring, missesDuring float64
	s.afterCommit = func() { // committed, the epoch still odd
		s.afterCommit = nil
		h, m := hits(), misses()
		during = firstPage(t, s, "alice")
		hitsDuring, missesDuring = hits()-h, misses()-m
	}
	edit := post("dave", "d1", 30)
	edit.Op, edit.Record = OpUpdate, json.RawMessage(`{"edited":true}`)
	apply(t, s, edit) // changes a record alice's page does not show
	if during == nil {
		t.Fatal("no page was read during the commit")
	}
	if len(during) != 2 || hitsDuring != 2 || missesDuring != 0 {
		t.Errorf("page read during a commit changing another record: %d items, %v hits, %v misses; want 2 items from the cache", len(during), hitsDuring, missesDuring)
	}
}

// setBytes lays a record out in two allocations; each field must still
// read as it did, and none may alias the row's buffers, which the driver
// reuses for the next row.
func TestCachedRecordSetBytesCopiesEachField(t *testing.T) {
	did, rkey := []byte("did:plc:abc"), []byte("3kabc")
	cid, body := []byte("bafyrei"), []byte(`{"text":"hi"}`)
	var r cachedRecord
	r.setBytes(did, "app.bsky.feed.post", rkey, cid, body)
	for _, b := range [][]byte{did, rkey, cid, body} {
		for i := range b {
			b[i] = 'X' // the driver reusing its buffers
		}
	}
	if r.uri != "at://did:plc:abc/app.bsky.feed.post/3kabc" || r.did != "did:plc:abc" || r.rkey != "3kabc" ||
		r.cid != "bafyrei" || string(r.value) != `{"text":"hi"}` {
		t.Fatalf("laid out as uri %q did %q rkey %q cid %q value %q", r.uri, r.did, r.rkey, r.cid, r.value)
	}
	if want := int64(cachedRecordOverhead + len(r.uri) + len(r.cid) + len(r.value)); r.size() != want {
		t.Fatalf("size %d, want %d (the did and rkey are inside the URI)", r.size(), want)
	}
}

// Random puts, hits and forgets keep the CLOCK's books: every id maps to
// the slot holding its record, the free list holds exactly the empty
// slots, the bytes are the records' sizes, and a put leaves the cache
// within its bound.
func TestRecordCacheBooksUnderRandomUse(t *testing.T) {
	c := newRecordCache(32 << 10)
	rng := rand.New(rand.NewPCG(7, 11))
	for step := range 20_000 {
		id := int64(rng.IntN(400))
		switch rng.IntN(4) {
		case 0, 1:
			c.put(c.snapshot(), []*cachedRecord{{id: id, value: make([]byte, 100+rng.IntN(900))}})
			if c.bytes > c.maxBytes {
				t.Fatalf("step %d: %d bytes held after a put, bound %d", step, c.bytes, c.maxBytes)
			}
		case 2:
			c.get(id)
		case 3:
			c.changing([]int64{id}).done()
		}
	}
	var bytes int64
	empty := 0
	for i, slot := range c.slots {
		if slot.rec == nil {
			empty++
			continue
		}
		bytes += slot.rec.size()
		if got, ok := c.byID[slot.rec.id]; !ok || int(got) != i {
			t.Fatalf("slot %d holds record %d, which maps to slot %d (%v)", i, slot.rec.id, got, ok)
		}
	}
	if len(c.byID) != len(c.slots)-empty || len(c.free) != empty || bytes != c.bytes {
		t.Fatalf("%d ids, %d slots of which %d empty, %d free; %d bytes counted, %d held",
			len(c.byID), len(c.slots), empty, len(c.free), bytes, c.bytes)
	}
}

// A record put into a full cache whose every record was read since the
// hand last passed takes the slot the put freed, behind the hand, and so
// survives: the hand clears the others' marks first (a review found the
// new records evicted by their own put, when they went after the hand).
func TestRecordCacheKeepsWhatItJustPut(t *testing.T) {
	c := newRecordCache(16 << 10)
	rec := func(id int64) *cachedRecord { return &cachedRecord{id: id, value: make([]byte, 300)} }
	var id int64
	for c.bytes+rec(0).size() <= c.maxBytes {
		c.put(c.snapshot(), []*cachedRecord{rec(id)})
		id++
	}
	for round := range 3 {
		for i := range id {
			c.get(i)
		}
		page := []*cachedRecord{rec(1000 + 3*int64(round)), rec(1001 + 3*int64(round)), rec(1002 + 3*int64(round))}
		c.put(c.snapshot(), page)
		for _, r := range page {
			if _, ok := c.get(r.id); !ok {
				t.Fatalf("round %d: record %d was evicted by its own put", round, r.id)
			}
		}
	}
}

// get returns the cached record of id, as a page's lookup would.
func (c *recordCache) get(id int64) (*cachedRecord, bool) {
	var r [1]*cachedRecord
	if c.lookup([]PageKey{{RecordID: id}}, r[:]) == 1 {
		return r[0], true
	}
	return nil, false
}
