package feeds

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// While pages are read, a record the stream creates is in the cache once
// its batch commits, so the first page to show it reads nothing from the
// file; what the cache gives is what the file gives.
func TestRecordCacheHoldsWhatACommitCreated(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1))
	firstPage(t, s, "alice")
	apply(t, s, post("carol", "p1", 10), post("carol", "p2", 11))
	if entries, _ := s.recordCache.stats(); entries != 2 {
		t.Fatalf("cache holds %d records after the commit, want the 2 created", entries)
	}
	cached := firstPage(t, s, "alice")
	s.recordCache.forgetAll()
	read := firstPage(t, s, "alice")
	if len(read) != 2 || !reflect.DeepEqual(cached, read) {
		t.Fatalf("page from the cache %+v\nfrom the file %+v", cached, read)
	}

	// Served from the cache alone: the records table emptied behind the
	// store's back, a new post's page still shows it.
	apply(t, s, post("carol", "p3", 12))
	if _, err := s.writer.Exec(`DELETE FROM records`); err != nil {
		t.Fatal(err)
	}
	if items := firstPage(t, s, "alice"); len(items) != 3 || items[0].RKey != "p3" {
		t.Fatalf("page after a new post: %+v", items)
	}
}

// A record the same batch created and then changed is not cached as
// created: the page shows the edit, and a deleted one is not shown.
func TestRecordCacheLeavesOutWhatTheSameBatchChanged(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1))
	firstPage(t, s, "alice")
	upd := post("carol", "p1", 11)
	upd.Op, upd.CID, upd.Record = OpUpdate, "bafyedited", json.RawMessage(`{"text":"edited"}`)
	apply(t, s, post("carol", "p1", 10), upd, post("carol", "p2", 12), unpost("carol", "p2", 13))
	if entries, _ := s.recordCache.stats(); entries != 0 {
		t.Fatalf("cache holds %d records, want none: both were changed after their create", entries)
	}
	items := firstPage(t, s, "alice")
	if len(items) != 1 || items[0].CID != "bafyedited" || string(items[0].Value) != `{"text":"edited"}` {
		t.Fatalf("page: %+v, want only p1 as edited", items)
	}
}

// Nobody reading, nothing is cached at commit: a catch-up before the
// readers come spends no memory on records no page may show. A page read
// turns it on, and quietCommitsLimit commits with no page turn it off.
func TestRecordCacheHoldsCreatedRecordsOnlyWhilePagesAreRead(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1))
	n := int64(10)
	postOne := func() {
		n++
		apply(t, s, post("carol", fmt.Sprintf("p%d", n), n))
	}
	held := func() int {
		entries, _ := s.recordCache.stats()
		return entries
	}
	postOne()
	if got := held(); got != 0 {
		t.Fatalf("no page read yet: cache holds %d records, want 0", got)
	}
	firstPage(t, s, "alice") // reads p11, puts it in the cache
	for range quietCommitsLimit {
		postOne()
	}
	if got := held(); got != 1+quietCommitsLimit {
		t.Fatalf("after a page and %d commits: cache holds %d records, want %d", quietCommitsLimit, got, 1+quietCommitsLimit)
	}
	postOne()
	if got := held(); got != 1+quietCommitsLimit {
		t.Fatalf("a commit past the quiet limit was cached: %d records, want %d", got, 1+quietCommitsLimit)
	}
}

// A batch that creates more than the cache holds keeps only its newest
// records, a quarter of the cache at most: one catch-up commit must not
// flush what pages are reading (found by a review).
func TestRecordCacheTakesAQuarterOfItselfFromACommit(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true, RecordCacheMB: 1})
	apply(t, s, follow("alice", "carol", "f1", 1))
	firstPage(t, s, "alice")
	var batch []Change
	for i := range 4000 {
		batch = append(batch, post("carol", fmt.Sprintf("p%d", i), int64(10+i)))
	}
	apply(t, s, batch...)
	entries, held := s.recordCache.stats()
	if limit := s.recordCache.maxBytes / 4; held > limit || entries == 0 {
		t.Fatalf("cache holds %d records, %d bytes after one commit, want some and at most %d bytes", entries, held, limit)
	}
	page := firstPage(t, s, "alice")
	var hits int
	for _, it := range page {
		if _, ok := s.recordCache.get(it.Key.RecordID); ok {
			hits++
		}
	}
	if hits != len(page) {
		t.Errorf("%d of the newest page's %d records cached, want all: the commit must keep its newest", hits, len(page))
	}
}
