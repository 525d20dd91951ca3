package feeds

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Counts are the sizes an operator's status page shows. They are counted,
// not kept as counters, so every Counts call reads whole tables or
// indexes: call it from a background refresher, never per request.
//
// Cost: 0.4-0.5 s for 5M feed rows, 1M follows and 1M target records
// (index_all mode, checkpointed file). The per-lane item counts are one
// pass over feed_items (0.25 s of it; counting a feed's lanes with a
// correlated IN, as Report does, takes 2-3 s), the follow and target
// totals SQLite's page-walking count(*).
type Counts struct {
	Feeds []FeedCount // in configuration order
	Lanes []LaneCount
	// Follows and Targets count the stored follow and target records.
	Follows, Targets int64
	// Listings counts account listings by state (complete, pending,
	// failed, gone); Failures are the ten latest failed ones.
	Listings []ListingCount
	Failures []ListingFailure
	Sweep    SweepReport
}

// LaneCount is the items of one (feed, target collection).
type LaneCount struct {
	Feed       string
	Collection syntax.NSID
	Items      int64
}

// Counts counts what the status page shows (see Counts).
func (s *Store) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	if err := s.countLanes(ctx, &c); err != nil {
		return c, err
	}
	if err := s.countViewers(ctx, &c); err != nil {
		return c, err
	}
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM follows`).Scan(&c.Follows); err != nil {
		return c, fmt.Errorf("count follows: %w", err)
	}
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM records`).Scan(&c.Targets); err != nil {
		return c, fmt.Errorf("count records: %w", err)
	}
	if err := s.countListings(ctx, &c); err != nil {
		return c, err
	}
	var end, lap int64
	err := s.reader.QueryRowContext(ctx, `
		SELECT cursor_viewer, last_pass_end_us, last_pass_lap_us, last_pass_rows FROM sweep_state WHERE id = 1`).
		Scan(&c.Sweep.CursorViewer, &end, &lap, &c.Sweep.LastPassRows)
	if err != nil {
		return c, fmt.Errorf("read sweep state: %w", err)
	}
	c.Sweep.LastPassEnd = fromMicros(end)
	c.Sweep.LastPassLap = time.Duration(lap) * time.Microsecond
	return c, nil
}

// countLanes counts every lane's items in one pass over feed_items: the
// table is keyed by viewer first, so a count per lane would be a pass per
// lane.
func (s *Store) countLanes(ctx context.Context, c *Counts) error {
	c.Feeds = nil
	index := map[string]int{}
	for _, l := range s.lanes {
		if _, ok := index[l.feed]; !ok {
			index[l.feed] = len(c.Feeds)
			c.Feeds = append(c.Feeds, FeedCount{Feed: l.feed})
		}
	}
	if len(s.lanes) == 0 {
		return nil
	}
	sums := make([]string, len(s.lanes))
	args := make([]any, len(s.lanes))
	dest := make([]any, len(s.lanes))
	c.Lanes = make([]LaneCount, len(s.lanes))
	for i, l := range s.lanes {
		sums[i] = fmt.Sprintf("total(target_id = ?%d)", i+1)
		args[i] = l.id
		c.Lanes[i] = LaneCount{Feed: l.feed, Collection: l.collection}
		dest[i] = new(float64)
	}
	q := "SELECT " + strings.Join(sums, ", ") + " FROM feed_items"
	if err := s.reader.QueryRowContext(ctx, q, args...).Scan(dest...); err != nil {
		return fmt.Errorf("count feed items: %w", err)
	}
	for i := range c.Lanes {
		c.Lanes[i].Items = int64(*dest[i].(*float64))
		c.Feeds[index[c.Lanes[i].Feed]].Items += c.Lanes[i].Items
	}
	return nil
}

// countViewers counts each feed's viewers: registered viewers, or in
// index_all mode every account whose follows of the feed's follow
// collection are stored.
func (s *Store) countViewers(ctx context.Context, c *Counts) error {
	for i := range c.Feeds {
		f := &c.Feeds[i]
		var err error
		if s.indexAll {
			lanes, _ := s.lanesOf(f.Feed)
			// Grouped on the primary key's first column: no sort, no
			// temporary table of distinct ids.
			err = s.reader.QueryRowContext(ctx, `
				SELECT count(*) FROM (SELECT actor_id FROM follows WHERE collection_id = ? GROUP BY actor_id)`,
				lanes[0].followCollID).Scan(&f.Viewers)
		} else {
			err = s.reader.QueryRowContext(ctx, `SELECT count(*) FROM viewers WHERE feed = ?`, f.Feed).Scan(&f.Viewers)
		}
		if err != nil {
			return fmt.Errorf("count viewers of %s: %w", f.Feed, err)
		}
	}
	return nil
}

func (s *Store) countListings(ctx context.Context, c *Counts) error {
	rows, err := s.reader.QueryContext(ctx, `
		SELECT CASE WHEN complete = 1 THEN 'complete' WHEN gone = 1 THEN 'gone'
			WHEN attempts > 0 THEN 'failed' ELSE 'pending' END AS state, count(*)
		FROM listings GROUP BY state ORDER BY state`)
	if err != nil {
		return fmt.Errorf("count listings: %w", err)
	}
	for rows.Next() {
		var l ListingCount
		if err := rows.Scan(&l.State, &l.Count); err != nil {
			rows.Close()
			return err
		}
		c.Listings = append(c.Listings, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count listings: %w", err)
	}
	rows, err = s.reader.QueryContext(ctx, `
		SELECT a.did, c.nsid, l.last_error, l.attempts, l.next_retry_us FROM listings l
		JOIN actors a ON a.id = l.actor_id JOIN collections c ON c.id = l.collection_id
		WHERE l.complete = 0 AND l.attempts > 0 ORDER BY l.updated_us DESC LIMIT 10`)
	if err != nil {
		return fmt.Errorf("list failed listings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var f ListingFailure
		var next int64
		if err := rows.Scan(&f.Account, &f.Collection, &f.Error, &f.Attempts, &next); err != nil {
			return err
		}
		f.NextRetry = fromMicros(next)
		c.Failures = append(c.Failures, f)
	}
	return rows.Err()
}

const recentSyncRunsSQL = `
	SELECT kind, subject, collection, pages, written, skipped, outcome, error, started_us, duration_us,
		start_cursor, end_cursor
	FROM sync_runs ORDER BY started_us DESC, id DESC LIMIT ?`

// RecentSyncRuns returns the newest sync runs, newest first: a walk back
// along sync_runs_by_start, limit rows long, cheap enough for a request.
func (s *Store) RecentSyncRuns(ctx context.Context, limit int) ([]SyncRun, error) {
	rows, err := s.reader.QueryContext(ctx, recentSyncRunsSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("read sync runs: %w", err)
	}
	defer rows.Close()
	var out []SyncRun
	for rows.Next() {
		var r SyncRun
		var started, took int64
		if err := rows.Scan(&r.Kind, &r.Subject, &r.Collection, &r.Pages, &r.Written, &r.Skipped,
			&r.Outcome, &r.Error, &started, &took, &r.StartCursor, &r.EndCursor); err != nil {
			return nil, err
		}
		r.Started = time.UnixMicro(started)
		r.Duration = time.Duration(took) * time.Microsecond
		out = append(out, r)
	}
	return out, rows.Err()
}

// FeedCount counts one feed's viewers and items.
type FeedCount struct {
	Feed           string
	Viewers, Items int64
}

// ListingCount counts account listings in one state.
type ListingCount struct {
	State string // complete, pending, failed, gone
	Count int64
}

// ListingFailure is one failed listing with its last error.
type ListingFailure struct {
	Account, Collection, Error string
	Attempts                   int
	NextRetry                  time.Time
}

// SweepReport is where the sweep stands.
type SweepReport struct {
	CursorViewer int64
	LastPassEnd  time.Time
	LastPassLap  time.Duration
	LastPassRows int64
}
