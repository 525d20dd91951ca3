package feeds

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// readPageSQL reads the keys of one page straight off the feed_items
// primary key (viewer, lane, sort_us, record_id) in reverse: the row-value
// comparison lets the index seek to the cursor, so a page costs the same
// however long the feed is and never sorts it. The viewer is its actor
// id, remembered after its first page (viewer_ids.go). The records come
// from the record cache, and those it misses from readRecordsSQL.
const readPageSQL = `
	SELECT fi.sort_us, fi.record_id
	FROM feed_items fi
	WHERE fi.viewer_id = ?1 AND fi.target_id = ?2 AND (fi.sort_us, fi.record_id) < (?3, ?4)
	ORDER BY fi.sort_us DESC, fi.record_id DESC
	LIMIT ?5`

// readRecordsSQL reads the records of a page the cache missed, by id (a
// JSON array): one rowid seek each.
const readRecordsSQL = `
	SELECT r.id, r.collection_id, r.sort_us, a.did, r.rkey, r.cid, r.indexed_us, r.body
	FROM records r JOIN actors a ON a.id = r.actor_id
	WHERE r.id IN (SELECT value FROM json_each(?1))`

// ReadFeed returns one page of a viewer's feed, newest first. A viewer the
// store has never seen has an empty feed. It returns ErrUnknownLane for a
// feed or collection the configuration does not declare.
func (s *Store) ReadFeed(ctx context.Context, q PageQuery) (Page, error) {
	l, ok := s.laneByKey[laneKey{q.Feed, q.Collection}]
	if !ok {
		return Page{}, ErrUnknownLane
	}
	if q.Limit <= 0 {
		return Page{}, fmt.Errorf("read feed: limit must be positive")
	}
	before := PageKey{SortUS: math.MaxInt64, RecordID: math.MaxInt64}
	if q.Before != nil {
		before = *q.Before
	}
	viewerID, found, err := s.viewerActorID(ctx, q.Viewer)
	if err != nil {
		return Page{}, err
	}
	if !found {
		return Page{Items: []Item{}}, nil
	}
	if len(q.Filters) > 0 {
		return s.readFiltered(ctx, l, viewerID, before, q)
	}
	// One row more than asked tells whether another page exists.
	epoch := s.recordCache.snapshot()
	keys, err := s.readPageKeys(ctx, q, l, viewerID, before)
	if err != nil {
		return Page{}, err
	}
	if s.afterPageKeys != nil {
		s.afterPageKeys()
	}
	more := len(keys) > q.Limit
	if more {
		keys = keys[:q.Limit]
	}
	items, err := s.pageItems(ctx, pageRecords{stmt: s.reads.records, epoch: epoch, cached: true}, l, keys)
	if err != nil {
		return Page{}, err
	}
	page := Page{Items: items}
	if more {
		// The last key, not the last item: a record deleted since the keys
		// were read leaves no item, and the feed goes on past it.
		last := keys[len(keys)-1]
		page.Next = &last
	}
	return page, nil
}

// readPageKeys reads the keys of up to limit+1 items before the cursor.
func (s *Store) readPageKeys(ctx context.Context, q PageQuery, l *lane, viewerID int64, before PageKey) ([]PageKey, error) {
	rows, err := s.reads.page.QueryContext(ctx, viewerID, l.id, before.SortUS, before.RecordID, q.Limit+1)
	if err != nil {
		return nil, fmt.Errorf("read feed page: %w", err)
	}
	defer rows.Close()
	keys := make([]PageKey, 0, q.Limit+1)
	for rows.Next() {
		var k PageKey
		if err := rows.Scan(&k.SortUS, &k.RecordID); err != nil {
			return nil, fmt.Errorf("read feed row: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read feed page: %w", err)
	}
	return keys, nil
}

// pageRecords says where pageItems gets records: stmt is readRecordsSQL
// on the read pool or bound to the caller's transaction; epoch is the
// record cache's, taken before the keys were read; cached says the cache
// may serve them (it is filled either way).
type pageRecords struct {
	stmt   *sql.Stmt
	epoch  uint64
	cached bool
}

// pageItems turns page keys into items, from the record cache or, for the
// records it misses, from one query, which fills the cache. A key whose
// record is gone has no item: that happens only when the record was
// deleted after the keys were read, and the page shows that newer state.
// Record ids are never reused (newRecordID), so an id read with the keys
// names no other record; the sort key and collection are checked anyway.
func (s *Store) pageItems(ctx context.Context, src pageRecords, l *lane, keys []PageKey) ([]Item, error) {
	recs := make([]*cachedRecord, len(keys))
	// The cache holds no version of a record older than its last
	// committed change (record_cache.go), so a hit is never older than
	// the keys.
	hits := 0
	if src.cached {
		hits = s.recordCache.lookup(keys, recs)
	}
	var missing []int
	for i, r := range recs {
		if r == nil {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		if err := s.readMissing(ctx, src, string(l.collection), keys, recs, missing); err != nil {
			return nil, err
		}
	}
	if src.cached {
		s.metrics.observeRecordCache(hits, len(missing))
	}
	items := make([]Item, 0, len(keys))
	for i, r := range recs {
		k := keys[i]
		if r == nil || r.sortUS != k.SortUS || r.collectionID != l.collectionID {
			continue
		}
		items = append(items, Item{
			URI: r.uri, CID: r.cid, DID: r.did, Collection: string(l.collection), RKey: r.rkey,
			TimeUS: r.timeUS, Value: r.value, Key: k,
		})
	}
	return items, nil
}

// readMissing reads the records at keys[missing] into recs and caches
// them.
func (s *Store) readMissing(ctx context.Context, src pageRecords, collection string, keys []PageKey, recs []*cachedRecord, missing []int) error {
	ids := make([]byte, 0, 16*len(missing))
	ids = append(ids, '[')
	at := make(map[int64][]int, len(missing))
	for n, i := range missing {
		if n > 0 {
			ids = append(ids, ',')
		}
		id := keys[i].RecordID
		ids = strconv.AppendInt(ids, id, 10)
		at[id] = append(at[id], i)
	}
	ids = append(ids, ']')
	rows, err := src.stmt.QueryContext(ctx, string(ids))
	if err != nil {
		return fmt.Errorf("read feed records: %w", err)
	}
	defer rows.Close()
	fresh := make([]*cachedRecord, 0, len(missing))
	var did, rkey, cid, body sql.RawBytes // valid until the next row
	for rows.Next() {
		r := &cachedRecord{}
		if err := rows.Scan(&r.id, &r.collectionID, &r.sortUS, &did, &rkey, &cid, &r.timeUS, &body); err != nil {
			return fmt.Errorf("read feed record: %w", err)
		}
		r.setBytes(did, collection, rkey, cid, body)
		if !json.Valid(r.value) || !utf8.Valid(r.value) {
			// Records are valid JSON in UTF-8 when they come in (the
			// stream's decoder and the listings check them); one that
			// is not here was damaged at rest, or stored by a version
			// that let invalid UTF-8 inside strings through, as
			// json.Valid does. It must not take the page down with it,
			// nor make the answer invalid JSON (RFC 8259 8.1): it has
			// no item, like a record deleted meanwhile.
			// Checked here, once per read from the file, and not on
			// every page that shows it from the cache: it was a sixth
			// of getFeed's CPU time (docs/benchmarks.md).
			s.log.Warn("skip stored record with invalid JSON or UTF-8", "uri", r.uri)
			continue
		}
		for _, i := range at[r.id] {
			recs[i] = r
		}
		fresh = append(fresh, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read feed records: %w", err)
	}
	s.recordCache.put(src.epoch, fresh)
	return nil
}

// readStatements are the read path's statements, prepared once on the read
// pool (database/sql prepares them again on each pooled connection as it
// is first used): parsing the page query cost about a quarter of a page.
type readStatements struct {
	viewerID *sql.Stmt
	page     *sql.Stmt
	records  *sql.Stmt
	// viewer is StoredViewer's: every viewer's first read after a start
	// asks it, as many as there are viewers.
	viewer *sql.Stmt
}

func prepareReads(ctx context.Context, db *sql.DB) (*readStatements, error) {
	var r readStatements
	var err error
	if r.viewerID, err = db.PrepareContext(ctx, `SELECT id FROM actors WHERE did = ?`); err != nil {
		return nil, fmt.Errorf("prepare viewer lookup: %w", err)
	}
	if r.page, err = db.PrepareContext(ctx, readPageSQL); err != nil {
		r.viewerID.Close()
		return nil, fmt.Errorf("prepare page read: %w", err)
	}
	if r.records, err = db.PrepareContext(ctx, readRecordsSQL); err != nil {
		r.viewerID.Close()
		r.page.Close()
		return nil, fmt.Errorf("prepare page records read: %w", err)
	}
	if r.viewer, err = db.PrepareContext(ctx, readViewerSQL); err != nil {
		r.viewerID.Close()
		r.page.Close()
		r.records.Close()
		return nil, fmt.Errorf("prepare viewer read: %w", err)
	}
	return &r, nil
}
