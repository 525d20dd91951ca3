package feeds

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// recordCache keeps what a feed page shows of recently read records (the
// author's DID, rkey, CID, time and body) by record id, bounded in bytes
// and evicted by the CLOCK approximation of least recently used: a hit
// sets its slot's used mark, and eviction walks a hand round the slots,
// clearing marks and evicting the first unmarked record. A hit writes one
// flag, where moving an entry to the front of a list wrote three list
// elements scattered over the heap, each a likely cache miss, under the
// lock (benchmarks.md, sixteenth round).
//
// At full size the records table is far larger than a reader's page cache,
// so without it each of a page's 50 items costs a descent of the records
// b-tree, usually ending in a pread. A post reaches every follower of its
// author and the newest posts are what first pages show, so the same
// records are read over and over; with the cache a page is one range read
// of feed_items plus one lookup of the records it misses
// (docs/benchmarks.md).
//
// Staleness: a record's shown fields change only when the writer updates
// or deletes it (record ids are never reused). A commit that does forgets
// those ids before it commits (changing), and the epoch, odd from then
// until the commit is done, works as a sequence lock for fills: a read
// may put what it read only if the epoch has not moved since before its
// query, so rows read before a commit can never come back after the
// commit's forget. So the cache never holds a version of a record older
// than the last committed change of it, and a page takes hits whenever it
// reads, during a commit too: at a live 1,000 events/s the writer is
// inside a commit (and its checkpoints) for much of each second, and
// pages that took no hits then missed a sixth of their records
// (docs/benchmarks.md, fifteenth round).
type recordCache struct {
	maxBytes int64
	epoch    atomic.Uint64

	mu    sync.Mutex
	bytes int64
	byID  map[int64]int32 // slot of each cached record
	slots []cacheSlot
	free  []int32 // empty slots
	hand  int     // the next slot eviction looks at
	// sized, when set, is told the bytes held after every change, under
	// mu, so a gauge never ends on an older value than the cache holds.
	sized func(bytes int64)
	// lookups counts pages looked up; beingRead compares it with what it
	// saw (seenLookups) to tell whether pages are being read, and
	// quietCommits counts its calls since it last saw one.
	lookups, seenLookups uint64
	quietCommits         int
}

// quietCommitsLimit is how many transactions go on caching the records
// they create after the last page read: a daemon nobody reads from (a
// catch-up before the readers come, the ingest benchmark) spends neither
// memory nor time on records no page may show.
const quietCommitsLimit = 100

// cachedRecord is an immutable copy of a record's page fields: readers
// share it, so nobody may change it (or its Value's bytes) once cached.
type cachedRecord struct {
	id int64
	// collectionID and sortUS let a page tell the record its key was
	// written for from a later one given the same id.
	collectionID int64
	sortUS       int64
	did          string
	rkey         string
	cid          string
	timeUS       int64
	value        json.RawMessage
	uri          string // at://did/collection/rkey
}

// cacheSlot holds one cached record, or none (rec nil) on the free list.
type cacheSlot struct {
	rec *cachedRecord
	// used: read since the hand last passed. A record put is unmarked, so
	// records read once (a stream of misses) go before one read on every
	// page.
	used bool
}

// cachedRecordOverhead approximates the bytes an entry costs beyond its
// strings: the struct, its slot and the map entry.
const cachedRecordOverhead = 200

// size counts the did and rkey within the URI, as setBytes lays them out.
func (r *cachedRecord) size() int64 {
	return int64(cachedRecordOverhead + len(r.uri) + len(r.cid) + len(r.value))
}

// setBytes copies a record's identifiers and body out of the row that
// read it, in two allocations: the URI and the CID in one string, the did
// and rkey substrings of the URI, and the body. A page written from the
// cache then reads each record's bytes from two places instead of five
// scattered over the heap; waiting for those reads made writing a page's
// JSON four times slower in the daemon than in a benchmark whose records
// stay in the CPU's caches (benchmarks.md, sixteenth round).
func (r *cachedRecord) setBytes(did []byte, collection string, rkey, cid, body []byte) {
	var b strings.Builder
	uriLen := len("at://") + len(did) + 1 + len(collection) + 1 + len(rkey)
	b.Grow(uriLen + len(cid))
	b.WriteString("at://")
	b.Write(did)
	b.WriteByte('/')
	b.WriteString(collection)
	b.WriteByte('/')
	b.Write(rkey)
	b.Write(cid)
	ids := b.String()
	r.uri = ids[:uriLen]
	r.did = ids[len("at://") : len("at://")+len(did)]
	r.rkey = ids[uriLen-len(rkey) : uriLen]
	r.cid = ids[uriLen:]
	r.value = bytes.Clone(body)
}

// newRecordCache returns a cache of up to maxBytes; nil when maxBytes is
// 0, and a nil cache holds nothing.
func newRecordCache(maxBytes int64) *recordCache {
	if maxBytes <= 0 {
		return nil
	}
	return &recordCache{maxBytes: maxBytes, byID: map[int64]int32{}, quietCommits: quietCommitsLimit}
}

// snapshot returns the epoch to pass to put for rows read from a query
// started after this call.
func (c *recordCache) snapshot() uint64 {
	if c == nil {
		return 0
	}
	return c.epoch.Load()
}

// lookup sets recs[i] to the cached record of keys[i] where there is one,
// under one lock for the page, and returns how many it found.
func (c *recordCache) lookup(keys []PageKey, recs []*cachedRecord) (hits int) {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookups++
	for i, k := range keys {
		slot, ok := c.byID[k.RecordID]
		if !ok {
			continue
		}
		c.slots[slot].used = true
		recs[i] = c.slots[slot].rec
		hits++
	}
	return hits
}

// put caches records read by a query started after snapshot returned
// epoch, unless a commit forgot records since.
func (c *recordCache) put(epoch uint64, recs []*cachedRecord) {
	if c == nil || len(recs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch%2 != 0 || c.epoch.Load() != epoch {
		return
	}
	c.putLocked(recs)
}

// created caches the records a commit created, once it is done. They
// are the newest posts, the ones first pages show, and each is about to
// be read by its author's followers, the first of whom would otherwise
// miss it and query the file: once the cache is warm, nearly every miss
// of a page read beside a live stream (docs/benchmarks.md, twenty-first
// round). Only the writer calls it, after its commit and before its
// next, so no version it adds is older than the record's last committed
// change; a record the same commit changed after creating it (changed)
// is left out. A commit of another process is forgotten with everything
// else at the writer's next begin (forgetAll), as for records readers
// put.
func (c *recordCache) created(recs []*cachedRecord, changed []int64) {
	if c == nil || len(recs) == 0 {
		return
	}
	if len(changed) > 0 {
		gone := make(map[int64]struct{}, len(changed))
		for _, id := range changed {
			gone[id] = struct{}{}
		}
		recs = slices.DeleteFunc(recs, func(r *cachedRecord) bool {
			_, ok := gone[r.id]
			return ok
		})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(recs)
}

// beingRead reports whether a page was read within the last
// quietCommitsLimit calls, one a transaction that creates records
// (txWriter.cacheCreated). A nil cache is never read.
func (c *recordCache) beingRead() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lookups != c.seenLookups {
		c.seenLookups, c.quietCommits = c.lookups, 0
	} else if c.quietCommits < quietCommitsLimit {
		c.quietCommits++
	}
	return c.quietCommits < quietCommitsLimit
}

// putLocked caches recs; c.mu is held.
func (c *recordCache) putLocked(recs []*cachedRecord) {
	for _, r := range recs {
		n := r.size()
		if n > c.maxBytes/16 {
			continue // one outsized record must not flush the cache
		}
		if slot, ok := c.byID[r.id]; ok {
			c.bytes += n - c.slots[slot].rec.size()
			c.slots[slot].rec = r
			continue
		}
		// Evict first, so the new record takes the slot just freed,
		// behind the hand: it has a whole turn to be read again before
		// the hand comes back to it.
		for c.bytes+n > c.maxBytes && len(c.byID) > 0 {
			c.evictOne()
		}
		c.byID[r.id] = c.newSlot(r)
		c.bytes += n
	}
	for c.bytes > c.maxBytes { // a record replaced by a larger one
		c.evictOne()
	}
	c.report()
}

// newSlot puts r in an empty slot, unmarked: the one freed last, which
// eviction leaves just behind the hand; c.mu is held.
func (c *recordCache) newSlot(r *cachedRecord) int32 {
	if n := len(c.free); n > 0 {
		slot := c.free[n-1]
		c.free = c.free[:n-1]
		c.slots[slot] = cacheSlot{rec: r}
		return slot
	}
	c.slots = append(c.slots, cacheSlot{rec: r})
	return int32(len(c.slots) - 1)
}

// evictOne moves the hand to the first unmarked record, clearing the
// marks it passes, and evicts it; c.mu is held and a record is cached.
// Within two turns every mark it passed is cleared, so it finds one.
func (c *recordCache) evictOne() {
	for {
		slot := &c.slots[c.hand]
		at := c.hand
		c.hand = (c.hand + 1) % len(c.slots)
		switch {
		case slot.rec == nil:
		case slot.used:
			slot.used = false
		default:
			c.remove(int32(at))
			return
		}
	}
}

// remove empties a slot that holds a record; c.mu is held.
func (c *recordCache) remove(slot int32) {
	r := c.slots[slot].rec
	c.bytes -= r.size()
	delete(c.byID, r.id)
	c.slots[slot] = cacheSlot{}
	c.free = append(c.free, slot)
}

// report tells sized the bytes held; c.mu is held.
func (c *recordCache) report() {
	if c.sized != nil {
		c.sized(c.bytes)
	}
}

// recordChanges is a commit's notice that it changes records.
type recordChanges struct {
	c *recordCache
}

// changing tells the cache, before a commit, that the commit updates or
// deletes the records of ids: it forgets them, and the epoch turns odd,
// so no read puts a record until done.
func (c *recordCache) changing(ids []int64) recordChanges {
	if c == nil || len(ids) == 0 {
		return recordChanges{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch.Add(1)
	for _, id := range ids {
		if slot, ok := c.byID[id]; ok {
			c.remove(slot)
		}
	}
	c.report()
	return recordChanges{c: c}
}

// done, after the commit (whether or not it succeeded), turns the epoch
// even again: reads that began before it can still not cache what they
// read, and reads that begin after it read the committed records.
func (ch recordChanges) done() {
	if ch.c != nil {
		ch.c.epoch.Add(1)
	}
}

// forgetAll empties the cache: another process committed to the file
// (other_writers.go), so any record may have changed. The epoch moves on
// and stays even, so reads that began before cannot put what they read.
// The caller holds the Store's writeMu, so no commit is changing records.
func (c *recordCache) forgetAll() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch.Add(2)
	clear(c.byID)
	c.slots, c.free, c.hand, c.bytes = nil, nil, 0, 0
	c.report()
}

// stats returns the entries and bytes held, for the metrics.
func (c *recordCache) stats() (entries int, bytes int64) {
	if c == nil {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID), c.bytes
}
