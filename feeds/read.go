package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
)

// readPageSQL reads one page straight off the feed_items primary key
// (viewer, lane, sort_us, record_id) in reverse: the row-value comparison
// lets the index seek to the cursor, so a page costs the same however long
// the feed is and never sorts it.
//
// The collection is the lane's, so it is not joined per row; the viewer is
// looked up in the same statement (an unknown viewer reads an empty page).
const readPageSQL = `
	SELECT fi.sort_us, fi.record_id, a.did, r.rkey, r.cid, r.indexed_us, r.body
	FROM feed_items fi
	JOIN records r ON r.id = fi.record_id
	JOIN actors a ON a.id = r.actor_id
	WHERE fi.viewer_id = (SELECT id FROM actors WHERE did = ?1) AND fi.target_id = ?2 AND (fi.sort_us, fi.record_id) < (?3, ?4)
	ORDER BY fi.sort_us DESC, fi.record_id DESC
	LIMIT ?5`

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
	if len(q.Filters) > 0 {
		var viewerID int64
		err := s.reads.viewerID.QueryRowContext(ctx, string(q.Viewer)).Scan(&viewerID)
		if errors.Is(err, sql.ErrNoRows) {
			return Page{Items: []Item{}}, nil
		}
		if err != nil {
			return Page{}, fmt.Errorf("look up viewer: %w", err)
		}
		return s.readFiltered(ctx, l, viewerID, before, q)
	}
	// One row more than asked tells whether another page exists.
	rows, err := s.reads.page.QueryContext(ctx, string(q.Viewer), l.id, before.SortUS, before.RecordID, q.Limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("read feed page: %w", err)
	}
	defer rows.Close()
	collection := string(l.collection)
	items := make([]Item, 0, q.Limit)
	more := false
	for rows.Next() {
		if len(items) == q.Limit {
			more = true
			break
		}
		it := Item{Collection: collection}
		if err := scanItem(rows, &it.Key.SortUS, &it.Key.RecordID, &it); err != nil {
			return Page{}, err
		}
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("read feed page: %w", err)
	}
	page := Page{Items: items}
	if more {
		last := items[len(items)-1].Key
		page.Next = &last
	}
	return page, nil
}

// scanItem scans a row of two head columns followed by the record columns
// (did, rkey, cid, indexed_us, body) into it; the caller sets the
// collection, which is the lane's.
func scanItem(rows *sql.Rows, head1, head2 any, it *Item) error {
	if err := rows.Scan(head1, head2, &it.DID, &it.RKey, &it.CID, &it.TimeUS, (*[]byte)(&it.Value)); err != nil {
		return fmt.Errorf("read feed row: %w", err)
	}
	it.URI = "at://" + it.DID + "/" + it.Collection + "/" + it.RKey
	return nil
}

// readStatements are the read path's statements, prepared once on the read
// pool (database/sql prepares them again on each pooled connection as it
// is first used): parsing the page query cost about a quarter of a page.
type readStatements struct {
	viewerID *sql.Stmt
	page     *sql.Stmt
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
	return &r, nil
}
