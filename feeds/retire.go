package feeds

import (
	"context"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// RetireViewers retires up to limit viewers who have not read their feed
// since before now−ttl: their feed rows go, and so do their follow records
// once they view no feed built from that follow collection (only viewers'
// follows are stored). Their next read is a first read again. Accounts
// that nobody follows any more leave the scope (their listings are reset).
// It returns how many viewers it retired; call it until it returns fewer
// than limit.
func (s *Store) RetireViewers(ctx context.Context, now time.Time, ttl time.Duration, limit int) (int, error) {
	if s.indexAll {
		return 0, nil
	}
	type stale struct {
		id        int64
		feed, did string
	}
	var list []stale
	err := s.write(ctx, func(w *txWriter) error {
		list = list[:0]
		rows, err := w.tx.QueryContext(ctx, `
			SELECT v.actor_id, v.feed, a.did FROM viewers v JOIN actors a ON a.id = v.actor_id
			WHERE v.last_read_us < ? ORDER BY v.last_read_us LIMIT ?`,
			now.Add(-ttl).UnixMicro(), limit)
		if err != nil {
			return fmt.Errorf("find stale viewers: %w", err)
		}
		for rows.Next() {
			var v stale
			if err := rows.Scan(&v.id, &v.feed, &v.did); err != nil {
				rows.Close()
				return err
			}
			list = append(list, v)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("find stale viewers: %w", err)
		}
		for _, v := range list {
			if err := w.retireViewer(v.id, v.feed); err != nil {
				return err
			}
			w.viewerChanges = append(w.viewerChanges, viewerChange{syntax.DID(v.did), v.feed, false})
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(list), nil
}

func (w *txWriter) retireViewer(id int64, feed string) error {
	// The feed's lanes as stored, enabled or not: a feed no longer
	// configured (renamed, removed) has its viewers retired too, and their
	// follows must go with them, as the stream stopped keeping them
	// (TestRetiringAViewerOfARemovedFeedDropsItsFollows).
	for _, q := range []string{
		`DELETE FROM feed_items WHERE viewer_id = ?1 AND target_id IN (SELECT id FROM feed_targets WHERE feed = ?2)`,
		`DELETE FROM viewers WHERE actor_id = ?1 AND feed = ?2`,
	} {
		if _, err := w.tx.ExecContext(w.ctx, q, id, feed); err != nil {
			return fmt.Errorf("retire viewer: %w", err)
		}
	}
	// The follows of the feed's follow collections, and any other of the
	// actor's that no feed it views is built from (a feed's earlier follow
	// collection): the stream stopped keeping them too.
	follows, err := scanIDs(w.tx.QueryContext(w.ctx, `
		SELECT follow_collection_id FROM feed_targets WHERE feed = ?2
		UNION SELECT collection_id FROM follows WHERE actor_id = ?1`, id, feed))
	if err != nil {
		return fmt.Errorf("retire viewer: %w", err)
	}
	for _, followColl := range follows {
		if err := w.dropFollowsUnviewed(id, followColl); err != nil {
			return err
		}
	}
	return nil
}

// dropFollowsUnviewed drops an actor's follows of a follow collection once
// it views no enabled feed built from it (only viewers' follows are
// stored), and lets the accounts it alone followed leave the scope.
func (w *txWriter) dropFollowsUnviewed(id, followColl int64) error {
	still, err := w.viewsFollows(id, followColl)
	if err != nil || still {
		return err
	}
	// No feed of this follow collection is read by the actor any more:
	// drop its follows (and their listing, so a return lists them again).
	subjects, err := scanIDs(w.tx.QueryContext(w.ctx,
		`SELECT DISTINCT subject_id FROM follows WHERE actor_id = ? AND collection_id = ?`, id, followColl))
	if err != nil {
		return fmt.Errorf("list retired viewer's followees: %w", err)
	}
	for _, q := range []string{
		`DELETE FROM follows WHERE actor_id = ? AND collection_id = ?`,
		`DELETE FROM listings WHERE actor_id = ? AND collection_id = ?`,
	} {
		if _, err := w.tx.ExecContext(w.ctx, q, id, followColl); err != nil {
			return fmt.Errorf("drop retired viewer's follows: %w", err)
		}
	}
	for _, sub := range subjects {
		if err := w.leaveScopeIfUnfollowed(sub); err != nil {
			return err
		}
	}
	return nil
}

// clearViewerFeed deletes the viewer's items in the lanes, one primary-key
// range each.
func (w *txWriter) clearViewerFeed(viewerID int64, lanes []*lane) error {
	for _, l := range lanes {
		if _, err := w.tx.ExecContext(w.ctx, `DELETE FROM feed_items WHERE viewer_id = ? AND target_id = ?`, viewerID, l.id); err != nil {
			return fmt.Errorf("clear feed %s: %w", l.feed, err)
		}
	}
	return nil
}
