package feeds

import (
	"context"
	"database/sql"
	"fmt"
	"math"
)

// Fan-out is deferred to the end of each write transaction (of each part of
// one applied in parts, OpenBatch.Add) and done for all of it at once, in
// feed_items primary-key order, in chunks of bounded size
// (fanout_chunks.go).
//
// A post reaches its author's followers, who are spread over the whole
// feed table, so inserting each post's rows as it comes lands every row
// on a random page: a descent of the b-tree from the root each time. The
// same rows inserted sorted by (viewer, lane, sort key) walk the table
// once, front to back: 2.6 times as many rows per second for a batch of
// 5,000 posts into a table of 2M rows when it was measured first
// (BenchmarkFanoutOrder, docs/benchmarks.md); on the twenty-fifth round's
// build and machine, no gain at 5,000 posts and 10–30% at 25,000.
//
// Deferring changes nothing a transaction can observe from outside, and
// inside it the order of events still decides the outcome:
//   - a record created and deleted in the same transaction is not fanned
//     out: the join with records finds it gone, or finds another record
//     under its reused rowid, which the join on author, collection and
//     sort key tells apart (the crash test caught a deleted post's
//     followers receiving the next post stored under its id, before
//     record ids stopped being reused);
//   - a follow or unfollow later in the transaction is seen by the
//     fan-out, which is the same end state as fanning out first and then
//     merging (INSERT OR IGNORE) or unmerging the followee's records,
//     but for the merge limit: a follow's merge brings the followee's
//     newest merge_limit records, and the fan-out then gives the new
//     follower all of the followee's records queued earlier in the
//     transaction, where one event a batch would have given it only the
//     merge's (found by a review; left as found, docs/hostile.md).

// fanoutSQL: pending_fanout is a TEMP table (memory, this connection only),
// so queueing costs no page of the database file.
var fanoutSQL = struct {
	createPending, queue, apply, rowBounds, grown, clear string
}{
	createPending: `CREATE TEMP TABLE IF NOT EXISTS pending_fanout (
		record_id     INTEGER PRIMARY KEY,
		author_id     INTEGER NOT NULL,
		collection_id INTEGER NOT NULL,
		sort_us       INTEGER NOT NULL)`,
	// queue replaces a pending row of the same record id, should a record
	// be queued twice; ids are never reused (newRecordID), so a pending
	// row never stands for another record.
	queue: `INSERT OR REPLACE INTO temp.pending_fanout (author_id, collection_id, sort_us, record_id) VALUES (?, ?, ?, ?)`,
	// apply is the one statement that turns target writes into feed rows:
	// every lane carrying the collection, joined with every follower of the
	// author through follows_by_subject, written in primary-key order. An
	// inactive author's records are stored but reach no feed: the fan-out
	// runs at commit, after the batch's account events, so a post and the
	// author's later deactivation in one batch must not fan out; a
	// reactivation merges them (applyAccount). Who
	// counts as a recipient is decided here and nowhere else (see
	// audience.go). Duplicate follow records of one subject collapse on the
	// primary key. CROSS JOIN fixes the loop order: the temp table has no
	// statistics, and the planner would otherwise scan follows. It covers
	// the pending records with ids ?1 to ?2 (fanout_chunks.go).
	apply: `INSERT OR IGNORE INTO feed_items (viewer_id, target_id, sort_us, record_id)
		SELECT f.actor_id, t.id, p.sort_us, p.record_id
		FROM temp.pending_fanout p
		CROSS JOIN records r ON r.id = p.record_id AND r.actor_id = p.author_id
			AND r.collection_id = p.collection_id AND r.sort_us = p.sort_us
		CROSS JOIN actors a ON a.id = p.author_id AND a.active = 1
		CROSS JOIN feed_targets t ON t.collection_id = p.collection_id AND t.enabled = 1
		CROSS JOIN follows f ON f.subject_id = p.author_id AND f.collection_id = t.follow_collection_id
		WHERE p.record_id BETWEEN ?1 AND ?2 AND f.actor_id <> p.author_id`, // + audienceFilter(…) + fanoutOrder
	// rowBounds gives each pending record, in id order, a bound on the feed
	// rows it fans out to: its author's follow records of every lane's
	// follow collection, counted once an author however many records it
	// queued. Stray follows (index_all mode stores everyone's) only make
	// the bound looser (fanout_chunks.go).
	rowBounds: `WITH authors AS (
			SELECT a.author_id, a.collection_id, sum((SELECT count(*) FROM follows f
				WHERE f.subject_id = a.author_id AND f.collection_id = t.follow_collection_id)) AS n
			FROM (SELECT DISTINCT author_id, collection_id FROM temp.pending_fanout) a
			CROSS JOIN feed_targets t ON t.collection_id = a.collection_id AND t.enabled = 1
			GROUP BY a.author_id, a.collection_id)
		SELECT p.record_id, a.n FROM temp.pending_fanout p
		JOIN authors a ON a.author_id = p.author_id AND a.collection_id = p.collection_id
		ORDER BY p.record_id`,
	// grown lists the (author, follow collection) pairs the fan-out reached
	// someone through, for the sweep's grown queue.
	grown: `SELECT DISTINCT p.author_id, t.follow_collection_id
		FROM temp.pending_fanout p
		CROSS JOIN feed_targets t ON t.collection_id = p.collection_id AND t.enabled = 1
		WHERE EXISTS (SELECT 1 FROM follows f
			WHERE f.subject_id = p.author_id AND f.collection_id = t.follow_collection_id AND f.actor_id <> p.author_id)`,
	clear: `DELETE FROM temp.pending_fanout`,
}

const fanoutOrder = ` ORDER BY 1, 2, 3, 4`

type fanoutStatements struct {
	queue, apply, applyOne, rowBounds, grown, clear *sql.Stmt
}

// prepareFanout prepares the statements on the pending table. db must be
// the writer pool, whose connections make the table as they open
// (writer_conn.go): a TEMP table exists on the connection that created it
// only.
func prepareFanout(ctx context.Context, db *sql.DB, audienceImplied bool) (*fanoutStatements, error) {
	var st fanoutStatements
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&st.queue, fanoutSQL.queue},
		{&st.apply, fanoutSQL.apply + audienceFilter(audienceImplied) + fanoutOrder},
		// One record's rows already come in follower order from
		// follows_by_subject: sorting them again only costs.
		{&st.applyOne, fanoutSQL.apply + audienceFilter(audienceImplied)},
		{&st.rowBounds, fanoutSQL.rowBounds},
		{&st.grown, fanoutSQL.grown},
		{&st.clear, fanoutSQL.clear},
	} {
		s, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.dst = s
	}
	return &st, nil
}

// queueFanout defers the fan-out of a stored target record to the end of
// the transaction.
func (w *txWriter) queueFanout(authorID, collID, sortUS, recordID int64) error {
	if _, err := w.exec(w.s.stmts.fan.queue, authorID, collID, sortUS, recordID); err != nil {
		return fmt.Errorf("queue fan-out: %w", err)
	}
	w.pendingFanout++
	if !w.s.indexAll {
		if w.pendingAuthors == nil {
			w.pendingAuthors = map[[2]int64]struct{}{}
		}
		w.pendingAuthors[[2]int64{authorID, collID}] = struct{}{}
	}
	return nil
}

// growFanoutAuthors queues for the sweep the followers of every author the
// fan-out reached. Outside index_all mode a target record is only stored
// when its author is followed by a viewer (authorInScope), so every queued
// author has followers and the list is known without a query; an author
// whose only follower is itself costs the sweep one empty expansion. In
// index_all mode every author's records are stored, most with no
// follower, so the grown statement keeps those out of the bounded queue.
func (w *txWriter) growFanoutAuthors() error {
	if !w.s.indexAll {
		for k := range w.pendingAuthors {
			w.grewFollowersOf(k[0], k[1])
		}
		return nil
	}
	rows, err := w.stmt(w.s.stmts.fan.grown).QueryContext(w.ctx)
	if err != nil {
		return fmt.Errorf("list grown authors: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a grownAuthor
		if err := rows.Scan(&a.author, &a.followColl); err != nil {
			return fmt.Errorf("list grown authors: %w", err)
		}
		w.grown.addAuthor(a)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list grown authors: %w", err)
	}
	return nil
}

// applyFanout writes the feed rows of every record queued in this
// transaction, in primary-key order, and notes whose followers grew. It
// runs just before commit.
func (w *txWriter) applyFanout() error {
	if w.pendingFanout == 0 {
		return nil
	}
	chunks := []fanoutChunk{{first: math.MinInt64, last: math.MaxInt64, records: w.pendingFanout}}
	if w.pendingFanout > 1 {
		var err error
		if chunks, err = w.planFanout(); err != nil {
			return err
		}
	}
	n, err := w.fanoutChunks(chunks)
	if err != nil {
		return err
	}
	w.res.FanoutRows += n
	if n > 0 {
		if err := w.growFanoutAuthors(); err != nil {
			return err
		}
	}
	if _, err := w.exec(w.s.stmts.fan.clear); err != nil {
		return fmt.Errorf("clear pending fan-out: %w", err)
	}
	w.pendingFanout = 0
	clear(w.pendingAuthors)
	return nil
}

// fanoutChunks writes the feed rows of the pending records chunk by chunk
// and returns how many it wrote.
func (w *txWriter) fanoutChunks(chunks []fanoutChunk) (int64, error) {
	var n int64
	for _, c := range chunks {
		apply := w.s.stmts.fan.apply
		if c.records == 1 {
			apply = w.s.stmts.fan.applyOne
		}
		rows, err := w.exec(apply, c.first, c.last)
		if err != nil {
			return n, fmt.Errorf("fan out: %w", err)
		}
		n += rows
	}
	return n, nil
}
