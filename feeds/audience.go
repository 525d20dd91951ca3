package feeds

import (
	"context"
	"fmt"
	"time"
)

// audienceFilter is the single predicate deciding who receives fan-out,
// appended to the fan-out join of follows f and feed_targets t.
//
// In index_all mode every account whose follow records are stored is a
// viewer of every feed, so the join itself is the audience. Otherwise the
// audience is the viewers registered for the lane's feed; since only
// viewers' follow records are stored at all, the check runs once per stored
// follower of the author, never once per follower on the network.
//
// implied drops the check where the stored follows already are the
// audience (checkAudience): a probe of viewers per fan-out row is about
// 11% of the instructions of an ingested event.
func audienceFilter(implied bool) string {
	if implied {
		return ``
	}
	return ` AND EXISTS (SELECT 1 FROM viewers v WHERE v.actor_id = f.actor_id AND v.feed = t.feed)`
}

// strayFollowersSQL counts the accounts holding follow records of
// collection ?1 without being a viewer of feed ?2. It hops from one
// follower to the next on the follows primary key (one seek per follower,
// not a scan of every follow record), so it costs about a second at a
// hundred thousand viewers.
const strayFollowersSQL = `WITH RECURSIVE a(id) AS (
		SELECT (SELECT actor_id FROM follows ORDER BY actor_id LIMIT 1)
		UNION ALL
		SELECT (SELECT actor_id FROM follows WHERE actor_id > a.id ORDER BY actor_id LIMIT 1)
		FROM a WHERE a.id IS NOT NULL)
	SELECT count(*) FROM a WHERE a.id IS NOT NULL
	AND EXISTS (SELECT 1 FROM follows f WHERE f.actor_id = a.id AND f.collection_id = ?1)
	AND NOT EXISTS (SELECT 1 FROM viewers v WHERE v.actor_id = a.id AND v.feed = ?2)`

// checkAudience decides at start whether the fan-out may trust the stored
// follows to be its audience. Outside index_all mode follow records are
// stored only for viewers of a feed built from their collection, and
// dropped when the account stops viewing every such feed (retireViewer),
// so when each follow collection feeds one feed, every stored follower is
// that feed's viewer and the per-row check is redundant. Two things can
// break that, and both are looked for here rather than assumed away:
//   - two feeds over one follow collection (a viewer of one is not a
//     viewer of the other): the check stays;
//   - follow records of accounts that are no viewers, left by an earlier
//     index_all run or by a feed since removed from the configuration:
//     they are counted at every start, and while there are any the check
//     stays (the log says how many).
//
// While running, every write path keeps the invariant: a follow is stored
// only for a viewer (followerInScope, ApplyListingPage) and the
// configuration does not change.
func (s *Store) checkAudience(ctx context.Context) error {
	if s.indexAll {
		s.audienceImplied = true
		return nil
	}
	feedOf := map[int64]string{}
	for i := range s.lanes {
		l := &s.lanes[i]
		if f, seen := feedOf[l.followCollID]; seen && f != l.feed {
			s.log.Info("fanout_audience_checked", "reason", "two feeds share a follow collection",
				"collection", l.followCollection)
			return nil
		}
		feedOf[l.followCollID] = l.feed
	}
	start := time.Now()
	for coll, feed := range feedOf {
		var stray int64
		if err := s.writer.QueryRowContext(ctx, strayFollowersSQL, coll, feed).Scan(&stray); err != nil {
			return fmt.Errorf("check fan-out audience: %w", err)
		}
		if stray > 0 {
			s.log.Info("fanout_audience_checked", "reason", "follow records of accounts that view no feed",
				"feed", feed, "accounts", stray, "took", time.Since(start))
			return nil
		}
	}
	s.audienceImplied = true
	s.log.Info("fanout_audience_implied", "took", time.Since(start))
	return nil
}
