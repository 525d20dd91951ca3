package feeds

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// syncLanes writes the configured feeds into feed_targets, interning their
// collections, and loads the lanes into memory. A lane that left the
// configuration is disabled (its rows stay until pruned) rather than
// deleted in one large statement at start.
//
// A lane new to its feed, or enabled again, has no backlog in the feed:
// the feed's viewers are marked for a rebuild (rebuildViewersOf). So has a
// lane whose feed now follows another collection, whose rows are removed
// first (clearLane). That
// holds even where the collection was already stored for another feed, so
// the stream's scope did not change (CheckScope).
//
// keep (Options.Existing) leaves stored definitions as they are: the
// lanes are loaded the same way, in a transaction that is rolled back,
// and ErrFeedsDiffer says if the configured feeds would have changed them.
// A database with none stored takes the configured ones.
func (s *Store) syncLanes(ctx context.Context, feeds []Feed, keep bool) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	before, err := laneDefinitions(ctx, tx)
	if err != nil {
		return err
	}
	enabled := map[laneKey]bool{}
	followedBy := map[laneKey]int64{} // each stored lane's follow collection
	rows, err := tx.QueryContext(ctx, `
		SELECT t.feed, c.nsid, t.enabled, t.follow_collection_id
		FROM feed_targets t JOIN collections c ON c.id = t.collection_id`)
	if err != nil {
		return fmt.Errorf("read lanes: %w", err)
	}
	for rows.Next() {
		var k laneKey
		var on bool
		var follow int64
		if err := rows.Scan(&k.feed, &k.collection, &on, &follow); err != nil {
			rows.Close()
			return fmt.Errorf("read lanes: %w", err)
		}
		enabled[k], followedBy[k] = on, follow
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return fmt.Errorf("read lanes: %w", err)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read lanes: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE feed_targets SET enabled = 0`); err != nil {
		return err
	}
	var gained []string // feeds with a lane new or enabled again
	var stale []lane    // lanes whose rows are stale: follow collection changed, or re-enabled
	for _, f := range feeds {
		followID, err := internCollection(ctx, tx, f.FollowCollection)
		if err != nil {
			return err
		}
		s.followColls[f.FollowCollection] = followID
		for _, t := range f.Targets {
			collID, err := internCollection(ctx, tx, t.Collection)
			if err != nil {
				return err
			}
			s.targetColls[t.Collection] = collID
			var id int64
			err = tx.QueryRowContext(ctx, `
				INSERT INTO feed_targets (feed, collection_id, follow_collection_id, cap, merge_limit, enabled)
				VALUES (?, ?, ?, ?, ?, 1)
				ON CONFLICT (feed, collection_id) DO UPDATE SET
					follow_collection_id = excluded.follow_collection_id,
					cap = excluded.cap,
					merge_limit = excluded.merge_limit,
					enabled = 1
				RETURNING id`,
				f.Name, collID, followID, t.Cap, f.MergeLimit).Scan(&id)
			if err != nil {
				return fmt.Errorf("feed %q target %s: %w", f.Name, t.Collection, err)
			}
			l := lane{
				id: id, feed: f.Name,
				collection: t.Collection, collectionID: collID,
				followCollection: f.FollowCollection, followCollID: followID,
				cap: t.Cap, mergeLimit: f.MergeLimit,
			}
			key := laneKey{f.Name, t.Collection}
			before, stored := followedBy[key]
			// A lane whose follow collection changed holds the old graph's
			// rows; one disabled until now missed the unfollows and deletes
			// that reached only enabled lanes meanwhile (the sweep may not
			// have emptied it yet). Either is cleared and rebuilt (gained).
			if stored && (before != followID || !enabled[key]) {
				stale = append(stale, l)
			}
			if (!enabled[key] || stored && before != followID) && !slices.Contains(gained, f.Name) {
				gained = append(gained, f.Name)
			}
			s.lanes = append(s.lanes, l)
		}
	}
	for nsid := range s.followColls {
		if _, both := s.targetColls[nsid]; both {
			return fmt.Errorf("collection %s is a follow collection in one feed and a target in another", nsid)
		}
	}
	for i := range s.lanes {
		l := &s.lanes[i]
		s.laneByKey[laneKey{l.feed, l.collection}] = l
		s.lanesByFollow[l.followCollID] = append(s.lanesByFollow[l.followCollID], l)
	}
	if err := s.syncFields(ctx, tx, feeds); err != nil {
		return fmt.Errorf("sync fields: %w", err)
	}
	// The mode the daemon runs in is part of the definitions: a command
	// with index_all set otherwise took another audience for a feed (its
	// rebuild of an index_all feed rebuilt no one, and deleted the rebuild
	// the daemon had queued: TestACommandWithAnotherIndexAllModeLeavesTheQueuedRebuild).
	mode := int64(0)
	if s.indexAll {
		mode = 1
	}
	var storedMode int64
	switch err := tx.QueryRowContext(ctx, `SELECT seq FROM cursors WHERE kind = ?`, cursorKindIndexAll).Scan(&storedMode); {
	case errors.Is(err, sql.ErrNoRows):
		storedMode = mode // a database from before the mode was recorded
	case err != nil:
		return fmt.Errorf("read index_all mode: %w", err)
	}
	if keep && storedMode != mode {
		return fmt.Errorf("%w (ingest.index_all is %t in the config, %t in the database)", ErrFeedsDiffer, mode == 1, storedMode == 1)
	}
	if keep && before != laneDefinitionsNone {
		after, err := laneDefinitions(ctx, tx)
		if err != nil {
			return err
		}
		if after != before {
			return ErrFeedsDiffer
		}
		if err := tx.QueryRowContext(ctx, laneRowsSQL).Scan(&s.lanesAtOpen); err != nil {
			return fmt.Errorf("read feed definitions: %w", err)
		}
		return nil // rolled back: nothing was written
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO cursors (kind, seq) VALUES (?, ?) ON CONFLICT (kind) DO UPDATE SET seq = excluded.seq`,
		cursorKindIndexAll, mode); err != nil {
		return fmt.Errorf("store index_all mode: %w", err)
	}
	for _, l := range stale {
		if err := s.clearLane(ctx, tx, l); err != nil {
			return err
		}
	}
	// A target collection no enabled lane carried was out of the stream's
	// scope: what changed in it meanwhile never arrived, so its listings,
	// complete or not, start a new round, which the rebuild of the feeds
	// that gained it fetches and reconciles (listing_reconcile.go).
	// Otherwise a collection dropped from the config and added back kept
	// its listings complete, and the rebuild skipped them.
	// The same holds for a follow collection no enabled lane followed:
	// its listings (the viewers' follows) are as stale.
	carried := map[syntax.NSID]bool{}
	carriedFollows := map[int64]bool{}
	for k, on := range enabled {
		if on {
			carried[k.collection] = true
			carriedFollows[followedBy[k]] = true
		}
	}
	reopen := map[syntax.NSID]int64{}
	for nsid, collID := range s.targetColls {
		if !carried[nsid] {
			reopen[nsid] = collID
		}
	}
	for nsid, collID := range s.followColls {
		if !carriedFollows[collID] {
			reopen[nsid] = collID
		}
	}
	for nsid, collID := range reopen {
		if _, err := tx.ExecContext(ctx, `UPDATE listings SET `+reopenListing+` WHERE collection_id = ?`, collID); err != nil {
			return fmt.Errorf("reopen listings of %s: %w", nsid, err)
		}
	}
	for _, feed := range gained {
		if err := s.rebuildViewersOf(ctx, tx, feed); err != nil {
			return err
		}
		if s.indexAll && before != laneDefinitionsNone {
			// In index_all mode no first read rebuilds a viewer: the
			// feed's rebuild is queued here, with the change, and the
			// daemon runs it (UnfinishedRebuilds). Otherwise the lane
			// would keep only what arrives from now on, its stored
			// backlog skipped (TestAFeedAddedLaterInIndexAllGetsItsBacklog).
			nowUS := time.Now().UnixMicro()
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO cursors (kind, seq, time_us, updated_us) VALUES (?1, 0, ?2, ?2)
				ON CONFLICT (kind) DO UPDATE SET seq = 0, time_us = excluded.time_us, updated_us = excluded.updated_us`,
				rebuildCursorPrefix+feed, nowUS); err != nil {
				return fmt.Errorf("queue the rebuild of feed %q: %w", feed, err)
			}
			s.log.Info("feed gained a target: its rebuild is queued (index_all)", "feed", feed)
		}
	}
	if !keep {
		if err := s.dropMootRebuilds(ctx, tx, feeds); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// dropMootRebuilds deletes the rebuild positions of feeds the config no
// longer has. RebuildFeed refuses such a feed, so the daemon warned of each
// at every start, for good; a feed added back gains its targets and is
// rebuilt afresh (syncLanes). Only the daemon drops them: an operator
// command with another config is refused before it writes (keep).
func (s *Store) dropMootRebuilds(ctx context.Context, tx *sql.Tx, feeds []Feed) error {
	names := make([]string, len(feeds))
	for i, f := range feeds {
		names[i] = f.Name
	}
	configured, err := json.Marshal(names)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `DELETE FROM cursors
		WHERE kind LIKE ?1 AND substr(kind, ?2) NOT IN (SELECT value FROM json_each(?3))
		RETURNING substr(kind, ?2)`,
		rebuildCursorPrefix+"%", len(rebuildCursorPrefix)+1, string(configured))
	if err != nil {
		return fmt.Errorf("drop rebuilds of feeds no longer configured: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var feed string
		if err := rows.Scan(&feed); err != nil {
			return fmt.Errorf("drop rebuilds of feeds no longer configured: %w", err)
		}
		s.log.Warn("dropped the unfinished rebuild of a feed no longer configured", "feed", feed)
	}
	return rows.Err()
}

// ErrFeedsDiffer is returned by Open with Options.Existing when the
// configured feeds (targets, caps, merge limits, fields) are not the ones
// the database holds: the command was given another config than the
// daemon's.
var ErrFeedsDiffer = errors.New("the config's feeds differ from those the database holds: use the daemon's config")

// cursorKindIndexAll is the cursors row that records the mode the
// database was last opened in by the daemon (seq 1: index_all).
const cursorKindIndexAll = "index_all"

// laneDefinitionsNone is what laneDefinitions says of a database that
// holds no feed definition yet.
const laneDefinitionsNone = "/"

// laneRowsSQL reads every stored lane definition as one string.
const laneRowsSQL = `SELECT coalesce(group_concat(d, ';'), '') FROM (
			SELECT concat_ws('|', t.feed, c.nsid, f.nsid, t.cap, t.merge_limit, t.enabled) AS d
			FROM feed_targets t JOIN collections c ON c.id = t.collection_id
			JOIN collections f ON f.id = t.follow_collection_id ORDER BY t.id)`

// checkLanes refuses, in a store opened with Options.Existing (an
// operator command beside the daemon), a write built on lanes the
// database no longer holds: the daemon restarted with another config
// while the command ran, and a first read completed, or a viewer rebuilt,
// with the lanes from before would skip what the change asked for
// (TestACommandsFirstReadAcrossAConfigChangeDoesNotCompleteTheViewer).
func (w *txWriter) checkLanes() error {
	if w.s.lanesAtOpen == "" {
		return nil
	}
	var now string
	if err := w.tx.QueryRowContext(w.ctx, laneRowsSQL).Scan(&now); err != nil {
		return fmt.Errorf("read feed definitions: %w", err)
	}
	if now != w.s.lanesAtOpen {
		return fmt.Errorf("%w: the daemon's feeds changed while this command ran", ErrFeedsDiffer)
	}
	return nil
}

// laneDefinitions is every stored feed definition, lanes and fields, as
// one string to compare.
func laneDefinitions(ctx context.Context, tx *sql.Tx) (string, error) {
	var defs string
	err := tx.QueryRowContext(ctx, `SELECT
		(`+laneRowsSQL+`)
		|| '/' ||
		(SELECT coalesce(group_concat(d, ';'), '') FROM (
			SELECT concat_ws('|', id, collection_id, path, kind, enabled, backlog_after_id, backlog_end_id) AS d
			FROM record_field_defs ORDER BY id))`).Scan(&defs)
	if err != nil {
		return "", fmt.Errorf("read feed definitions: %w", err)
	}
	return defs, nil
}

// rebuildViewersOf marks every viewer of a feed that gained a lane for a
// rebuild: its next read is a first read again, which fetches the new
// collection per followed account from the PDSes (or finds it stored),
// lazily and through the first-read admission, never all at once.
func (s *Store) rebuildViewersOf(ctx context.Context, tx *sql.Tx, feed string) error {
	r, err := tx.ExecContext(ctx, `
		UPDATE viewers SET state = 'pending', attempts = 0, next_retry_us = 0
		WHERE feed = ? AND state = 'complete'`, feed)
	if err != nil {
		return fmt.Errorf("mark viewers of feed %q for rebuild: %w", feed, err)
	}
	if n, _ := r.RowsAffected(); n > 0 {
		s.log.Info("feed gained a target: its viewers are rebuilt on their next reads", "feed", feed, "viewers", n)
	}
	return nil
}

// clearLane empties a lane whose feed now follows another collection: its
// rows came from the old follow graph, which nothing reads any more (an
// unfollow there reaches no lane, and retention looks for a row's holders
// through the new graph only, so it would retire records the rows still
// name). The feed's viewers are rebuilt from the new graph on their next
// reads. One statement over the whole feed table, at start, once per such
// change of configuration.
func (s *Store) clearLane(ctx context.Context, tx *sql.Tx, l lane) error {
	r, err := tx.ExecContext(ctx, `DELETE FROM feed_items WHERE target_id = ?`, l.id)
	if err != nil {
		return fmt.Errorf("clear feed %q lane %s: %w", l.feed, l.collection, err)
	}
	n, _ := r.RowsAffected()
	if n > 0 {
		s.log.Info("feed lane was disabled or followed another collection: its stale rows are removed before its rebuild",
			"feed", l.feed, "collection", l.collection, "follow_collection", l.followCollection, "rows", n)
	}
	return nil
}

func internCollection(ctx context.Context, tx *sql.Tx, nsid syntax.NSID) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `
		INSERT INTO collections (nsid) VALUES (?)
		ON CONFLICT (nsid) DO UPDATE SET nsid = excluded.nsid
		RETURNING id`, string(nsid)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("intern collection %s: %w", nsid, err)
	}
	return id, nil
}
