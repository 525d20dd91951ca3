package feeds

import (
	"context"
	"database/sql"
	"fmt"
)

// sweepSQL holds the statements of the sweep, the grown queue and
// retention. Like writeSQL they are prepared once on the writer connection
// and bound to each transaction.
var sweepSQL = struct {
	cutoff, trim, clearLane, nextViewers                   string
	grownNext, grownFollowers, grownDone, grownAdvance     string
	grownRequeue, grownExists                              string
	grownCount, grownAgain, grownAddAuthor, grownAddViewer string
	grownHasViewer                                         string
	saveSweep, saveRetain                                  string
	retainWindow, retainProbes                             string
	retainRecords, retainTombstones                        string
	retainListing                                          string
}{
	// cutoff finds the newest row beyond a lane's cap, in page order
	// (sort_us, record_id): the unique key breaks ties at the cutoff, so
	// exactly cap rows stay. No row: the lane is at or under its cap, and
	// no delete is issued.
	cutoff: `SELECT sort_us, record_id FROM feed_items
		WHERE viewer_id = ?1 AND target_id = ?2
		ORDER BY sort_us DESC, record_id DESC LIMIT 1 OFFSET ?3`,
	// trim deletes that row and everything older, one primary key range.
	trim: `DELETE FROM feed_items
		WHERE viewer_id = ?1 AND target_id = ?2 AND (sort_us, record_id) <= (?3, ?4)`,
	// clearLane empties a lane that left the configuration.
	clearLane: `DELETE FROM feed_items WHERE viewer_id = ?1 AND target_id = ?2`,

	// nextViewers walks the distinct viewers after the cursor by index
	// seeks (a skip scan): each step costs one seek, however many rows a
	// viewer holds.
	nextViewers: `WITH RECURSIVE v(id, n) AS (
			SELECT (SELECT viewer_id FROM feed_items WHERE viewer_id > ?1 ORDER BY viewer_id LIMIT 1), 1
			UNION ALL
			SELECT (SELECT viewer_id FROM feed_items WHERE viewer_id > v.id ORDER BY viewer_id LIMIT 1), v.n + 1
			FROM v WHERE v.id IS NOT NULL AND v.n < ?2
		)
		SELECT id FROM v WHERE id IS NOT NULL`,

	grownNext: `SELECT id, viewer_id, author_id, collection_id, after_id, again
		FROM sweep_grown WHERE id > ?1 ORDER BY id LIMIT 1`,
	// grownFollowers expands an author entry through follows_by_subject,
	// in viewer order from where the last slice stopped.
	grownFollowers: `SELECT DISTINCT actor_id FROM follows
		WHERE subject_id = ?1 AND collection_id = ?2 AND actor_id > ?3
		ORDER BY actor_id LIMIT ?4`,
	grownDone:    `DELETE FROM sweep_grown WHERE id = ?1`,
	grownAdvance: `UPDATE sweep_grown SET after_id = ?2 WHERE id = ?1`,
	// grownRequeue starts an entry over at the back of the queue.
	grownRequeue: `UPDATE sweep_grown SET id = (SELECT max(id) + 1 FROM sweep_grown), after_id = 0, again = 0
		WHERE id = ?1`,
	grownExists: `SELECT EXISTS (SELECT 1 FROM sweep_grown)`,

	grownCount: `SELECT count(*) FROM sweep_grown`,
	// grownAgain finds an author's entry; one already part-way through its
	// followers must go round again.
	grownAgain: `UPDATE sweep_grown SET again = (again OR after_id > 0)
		WHERE author_id = ?1 AND collection_id = ?2`,
	grownAddAuthor: `INSERT INTO sweep_grown (author_id, collection_id) VALUES (?1, ?2)`,
	grownAddViewer: `INSERT INTO sweep_grown (viewer_id) VALUES (?1) ON CONFLICT (viewer_id) DO NOTHING`,
	grownHasViewer: `SELECT 1 FROM sweep_grown WHERE viewer_id = ?1`,

	saveSweep:  saveSweepSQL,
	saveRetain: saveRetainSQL,

	// retainWindow lists the candidates of a retention window: the next
	// records past the scan position older than the cutoff, with their
	// authors, so the window can end where its probes reach the budget.
	retainWindow: `SELECT indexed_us, id, actor_id, collection_id FROM records
		WHERE (indexed_us, id) > (?1, ?2) AND indexed_us < ?3
		ORDER BY indexed_us, id LIMIT ?4`,
	// retainProbes counts, up to a limit, the lanes retainRecords probes
	// for one record of the author: a follower's lane per follow of the
	// author in a follow collection that feeds the record's collection.
	retainProbes: `SELECT count(*) FROM (SELECT 1 FROM feed_targets t
		CROSS JOIN follows f
		WHERE t.collection_id = ?2 AND f.subject_id = ?1 AND f.collection_id = t.follow_collection_id
		LIMIT ?3)`,
	// retainRecords deletes the window's records that no feed holds. Only
	// followers of the author can hold a record, so the NOT EXISTS probes
	// each follower's lane with one primary-key seek: over a record's life
	// it costs as many seeks as its fan-out wrote rows.
	//
	// An update leaves indexed_us as it was, so a record is kept while its
	// revision (a TID, the time of its last write) is newer than the
	// cutoff (?6): retired between a live update and the replay of that
	// update after a reconnect, it was stored again by the replay and fanned
	// out, a duplicate changing the store (TestAReplayedUpdateDoesNotBringBackARetiredRecord).
	// A revision a PDS stamped more than a window past the stream's time
	// (?7) keeps nothing, so one stamped ahead keeps its record one more
	// window at most. The bound is on the revision, not the indexed time:
	// bounding indexed_us (a window before the cutoff) retired at once any
	// record indexed two windows before its edit, whatever the edit's
	// revision, and the edit's replay stored it again
	// (TestAReplayedUpdateDoesNotBringBackARetiredRecord, "three windows old").
	retainRecords: `DELETE FROM records
		WHERE (indexed_us, id) > (?1, ?2) AND (indexed_us, id) <= (?3, ?4) AND indexed_us < ?5
		AND (rev < ?6 OR rev >= ?7)
		AND NOT EXISTS (
			-- CROSS JOIN fixes the order lane → follower → feed row, so the
			-- feed row is a full primary-key seek.
			SELECT 1 FROM feed_targets t
			CROSS JOIN follows f
			CROSS JOIN feed_items fi
			WHERE t.collection_id = records.collection_id
			AND f.subject_id = records.actor_id AND f.collection_id = t.follow_collection_id
			AND fi.viewer_id = f.actor_id AND fi.target_id = t.id
			AND fi.sort_us = records.sort_us AND fi.record_id = records.id)
		RETURNING id, actor_id, collection_id`,
	// retainListing makes a complete listing of an account whose records
	// were retired incomplete again (the invalidation scope.go uses), so
	// the account is fetched again when a viewer needs it. A listing in
	// progress is left alone: it is filling the hole already.
	retainListing: `UPDATE listings SET ` + reopenListing + `
		WHERE actor_id = ?1 AND collection_id = ?2 AND complete = 1`,
	retainTombstones: `DELETE FROM tombstones WHERE (actor_id, collection_id, rkey) IN (
		SELECT actor_id, collection_id, rkey FROM tombstones
		WHERE deleted_us < ?1 ORDER BY deleted_us LIMIT ?2)`,
}

type sweepStatements struct {
	cutoff, trim, clearLane, nextViewers                   *sql.Stmt
	grownNext, grownFollowers, grownDone, grownAdvance     *sql.Stmt
	grownRequeue, grownExists                              *sql.Stmt
	grownCount, grownAgain, grownAddAuthor, grownAddViewer *sql.Stmt
	grownHasViewer                                         *sql.Stmt
	saveSweep, saveRetain                                  *sql.Stmt
	retainWindow, retainProbes                             *sql.Stmt
	retainRecords, retainTombstones                        *sql.Stmt
	retainListing                                          *sql.Stmt
}

// sweepStatements prepares the sweep's statements on the writer once.
func (s *Store) sweepStatements(ctx context.Context) (*sweepStatements, error) {
	if s.sweep.stmts != nil {
		return s.sweep.stmts, nil
	}
	st := &sweepStatements{}
	q := &sweepSQL
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&st.cutoff, q.cutoff}, {&st.trim, q.trim}, {&st.clearLane, q.clearLane},
		{&st.nextViewers, q.nextViewers},
		{&st.grownNext, q.grownNext}, {&st.grownFollowers, q.grownFollowers},
		{&st.grownDone, q.grownDone}, {&st.grownAdvance, q.grownAdvance},
		{&st.grownRequeue, q.grownRequeue}, {&st.grownExists, q.grownExists},
		{&st.grownCount, q.grownCount}, {&st.grownAgain, q.grownAgain},
		{&st.grownAddAuthor, q.grownAddAuthor}, {&st.grownAddViewer, q.grownAddViewer},
		{&st.grownHasViewer, q.grownHasViewer},
		{&st.saveSweep, q.saveSweep}, {&st.saveRetain, q.saveRetain},
		{&st.retainWindow, q.retainWindow}, {&st.retainProbes, q.retainProbes},
		{&st.retainRecords, q.retainRecords},
		{&st.retainTombstones, q.retainTombstones}, {&st.retainListing, q.retainListing},
	} {
		ps, err := s.writer.PrepareContext(ctx, p.sql)
		if err != nil {
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.dst = ps
	}
	s.sweep.stmts = st
	return st, nil
}
