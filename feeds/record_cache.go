package feeds

import (
	"container/list"
	"encoding/json"
	"sync"
	"sync/atomic"
)

// recordCache keeps what a feed page shows of recently read records (the
// author's DID, rkey, CID, time and body) by record id, bounded in bytes
// and evicted least recently used.
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
// or deletes it (an id freed by a delete can be handed to the next
// record). The epoch works as a sequence lock around every commit that
// did: the writer makes it odd before the commit, and after the commit
// forgets those ids and makes it even again. A reader takes the epoch
// before its query and:
//   - takes hits only while it is even, and keeps them only if it has not
//     moved by the time the page is assembled: a page whose keys were read
//     after such a commit never shows a record from before it, in the
//     moment between the commit and the forgetting;
//   - may fill the cache only if it has not moved either: a read that saw
//     rows older than a commit can never put them back after the commit
//     forgot them.
type recordCache struct {
	maxBytes int64
	epoch    atomic.Uint64

	mu    sync.Mutex
	bytes int64
	byID  map[int64]*list.Element // of *cachedRecord
	lru   list.List               // front: most recently used
	// sized, when set, is told the bytes held after every change, under
	// mu, so a gauge never ends on an older value than the cache holds.
	sized func(bytes int64)
}

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

// cachedRecordOverhead approximates the bytes an entry costs beyond its
// strings: the struct, the list element and the map slot.
const cachedRecordOverhead = 200

func (r *cachedRecord) size() int64 {
	return int64(cachedRecordOverhead + len(r.did) + len(r.rkey) + len(r.cid) + len(r.value) + len(r.uri))
}

// newRecordCache returns a cache of up to maxBytes; nil when maxBytes is
// 0, and a nil cache holds nothing.
func newRecordCache(maxBytes int64) *recordCache {
	if maxBytes <= 0 {
		return nil
	}
	return &recordCache{maxBytes: maxBytes, byID: map[int64]*list.Element{}}
}

// snapshot returns the epoch to pass to put, and to unchangedSince, for
// rows read from a query started after this call.
func (c *recordCache) snapshot() uint64 {
	if c == nil {
		return 0
	}
	return c.epoch.Load()
}

// unchangedSince reports whether no commit changing records was under way
// at snapshot's epoch or has run since: hits got since then are current.
func (c *recordCache) unchangedSince(epoch uint64) bool {
	return c != nil && epoch%2 == 0 && c.epoch.Load() == epoch
}

// get returns the cached record of id.
func (c *recordCache) get(id int64) (*cachedRecord, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cachedRecord), true
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
	for _, r := range recs {
		n := r.size()
		if n > c.maxBytes/16 {
			continue // one outsized record must not flush the cache
		}
		if e, ok := c.byID[r.id]; ok {
			c.bytes -= e.Value.(*cachedRecord).size()
			e.Value = r
			c.lru.MoveToFront(e)
		} else {
			c.byID[r.id] = c.lru.PushFront(r)
		}
		c.bytes += n
	}
	for c.bytes > c.maxBytes {
		e := c.lru.Back()
		r := e.Value.(*cachedRecord)
		c.lru.Remove(e)
		delete(c.byID, r.id)
		c.bytes -= r.size()
	}
	c.report()
}

// report tells sized the bytes held; c.mu is held.
func (c *recordCache) report() {
	if c.sized != nil {
		c.sized(c.bytes)
	}
}

// recordChanges is a commit's notice that it changes records.
type recordChanges struct {
	c   *recordCache
	ids []int64
}

// changing tells the cache, before a commit, that the commit updates or
// deletes the records of ids: the epoch turns odd, so no page takes hits
// until done.
func (c *recordCache) changing(ids []int64) recordChanges {
	if c == nil || len(ids) == 0 {
		return recordChanges{}
	}
	c.epoch.Add(1)
	return recordChanges{c: c, ids: ids}
}

// done, after the commit (whether or not it succeeded), drops the ids and
// turns the epoch even again, so reads that began before can neither keep
// their hits nor cache what they read.
func (ch recordChanges) done() {
	c := ch.c
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.epoch.Add(1)
	for _, id := range ch.ids {
		if e, ok := c.byID[id]; ok {
			c.bytes -= e.Value.(*cachedRecord).size()
			c.lru.Remove(e)
			delete(c.byID, id)
		}
	}
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
