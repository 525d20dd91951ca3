package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// A rebuild rewrites one feed for every viewer from what is stored: the
// viewer's items in the feed's lanes are deleted and refilled with the
// newest records (up to each lane's cap) of the accounts they follow, the
// same statement a first read ends with. It is the operator's repair after
// a change of caps, a bug, or a restored backup (`appview rebuild`).
//
// Viewers are taken in actor id order, a chunk per write transaction, and
// the position (the last viewer rebuilt) is a row of the cursors table
// written in the same transaction: an interrupted rebuild resumes at the
// next viewer, a finished one deletes the row. Each chunk is a short
// transaction on the one writer, so a daemon running on the same file only
// waits for it like for any other batch; a viewer is rebuilt atomically,
// so a page read never sees it half-built.
//
// A chunk ends at its count of viewers or once it has held the write lock
// for RebuildOptions.Hold, whichever comes first: viewers differ by
// orders of magnitude (one following 200 quiet accounts, another 5,000
// busy ones), so a count alone let one chunk of heavy viewers hold the
// lock for seconds, past the daemon's busy timeout.

// RebuildOptions configures RebuildFeed.
type RebuildOptions struct {
	// Chunk is the number of viewers per transaction (default 16).
	Chunk int
	// Hold bounds how long one transaction keeps the write lock (default
	// DefaultRebuildHold): a chunk commits after the viewer that reached
	// it, however few it rebuilt. Every chunk rebuilds at least one.
	Hold time.Duration
	// Progress, when set, hears where the rebuild stands: once at the
	// start (a resumed rebuild starts past zero) and after every chunk.
	Progress func(RebuildProgress)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// RebuildProgress is where a feed's rebuild stands, counted in viewers.
type RebuildProgress struct {
	Done, Total int
	// Rows is the number of feed items this run wrote.
	Rows int64
	// Resumed is set when the run started from a stored position;
	// Started is when the rebuild (its first run) started.
	Resumed bool
	Started time.Time
}

// rebuildCursorPrefix names a feed's rebuild position in the cursors
// table: kind 'rebuild:<feed>', seq the last viewer (actor id) rebuilt,
// time_us when the rebuild started.
const rebuildCursorPrefix = "rebuild:"

// DefaultRebuildHold is how long a rebuild chunk holds the write lock at
// most, but for its last viewer: well inside the busy timeout, and about
// one live ingest batch, so a daemon beside the rebuild waits no longer
// for it than for its own writes.
const DefaultRebuildHold = 250 * time.Millisecond

// RebuildFeed rebuilds feed for all its viewers (in index_all mode, every
// account whose follows are stored), resuming a rebuild that was
// interrupted. A cancelled ctx stops it between or inside chunks; what
// committed stays, and the next call goes on from there.
func (s *Store) RebuildFeed(ctx context.Context, feed string, opts RebuildOptions) (RebuildProgress, error) {
	lanes, ok := s.lanesOf(feed)
	if !ok {
		return RebuildProgress{}, ErrUnknownLane
	}
	if opts.Chunk <= 0 {
		opts.Chunk = 16
	}
	if opts.Hold <= 0 {
		opts.Hold = DefaultRebuildHold
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	kind := rebuildCursorPrefix + feed
	after, started, err := s.rebuildPosition(ctx, kind)
	if err != nil {
		return RebuildProgress{}, err
	}
	p := RebuildProgress{Resumed: after > 0, Started: started}
	if p.Started.IsZero() {
		p.Started = opts.Now()
	}
	aud := s.rebuildAudience(feed, lanes)
	if err := s.reader.QueryRowContext(ctx, aud.count, aud.key, after).Scan(&p.Total, &p.Done); err != nil {
		return p, fmt.Errorf("count viewers: %w", err)
	}
	report := func() {
		// Viewers registered during the run can push done past the count
		// taken at the start.
		p.Total = max(p.Total, p.Done)
		if opts.Progress != nil {
			opts.Progress(p)
		}
	}
	report()
	for {
		var n int
		var last int64
		var rows int64
		err := s.write(ctx, func(w *txWriter) error {
			began := opts.Now()
			if err := w.checkLanes(); err != nil {
				return err
			}
			ids, err := scanIDs(w.tx.QueryContext(ctx, aud.next, aud.key, after, opts.Chunk))
			if err != nil {
				return fmt.Errorf("list viewers: %w", err)
			}
			if len(ids) == 0 {
				// Finished: forget the position.
				_, err := w.tx.ExecContext(ctx, `DELETE FROM cursors WHERE kind = ?`, kind)
				return err
			}
			for _, id := range ids {
				if err := w.clearViewerFeed(id, lanes); err != nil {
					return err
				}
				r, err := w.buildViewerFeed(id, lanes)
				if err != nil {
					return err
				}
				rows += r
				n, last = n+1, id
				if opts.Now().Sub(began) >= opts.Hold {
					break
				}
			}
			if _, err := w.tx.ExecContext(ctx, `
				INSERT INTO cursors (kind, seq, time_us, updated_us) VALUES (?1, ?2, ?3, ?4)
				ON CONFLICT (kind) DO UPDATE SET seq = excluded.seq, updated_us = excluded.updated_us`,
				kind, last, p.Started.UnixMicro(), opts.Now().UnixMicro()); err != nil {
				return fmt.Errorf("save rebuild position: %w", err)
			}
			return nil
		})
		if err != nil {
			return p, fmt.Errorf("rebuild %s: %w", feed, err)
		}
		if n == 0 {
			return p, nil
		}
		after = last
		p.Done += n
		p.Rows += rows
		report()
	}
}

// rebuildAudience is how a rebuild finds a feed's viewers: the registered
// ones, or in index_all mode every account whose follows are stored (the
// fan-out audience of that mode). Both walk a primary key in actor id
// order.
type rebuildAudience struct {
	key any // the feed name, or the follow collection id
	// count answers (viewers, viewers up to ?2); next lists up to ?3
	// viewers after ?2.
	count, next string
}

func (s *Store) rebuildAudience(feed string, lanes []*lane) rebuildAudience {
	if s.indexAll {
		return rebuildAudience{
			key: lanes[0].followCollID,
			count: `SELECT count(*), coalesce(sum(actor_id <= ?2), 0)
				FROM (SELECT DISTINCT actor_id FROM follows WHERE collection_id = ?1)`,
			next: `SELECT DISTINCT actor_id FROM follows WHERE collection_id = ?1 AND actor_id > ?2
				ORDER BY actor_id LIMIT ?3`,
		}
	}
	return rebuildAudience{
		key:   feed,
		count: `SELECT count(*), coalesce(sum(actor_id <= ?2), 0) FROM viewers WHERE feed = ?1`,
		next:  `SELECT actor_id FROM viewers WHERE feed = ?1 AND actor_id > ?2 ORDER BY actor_id LIMIT ?3`,
	}
}

// rebuildPosition reads a rebuild's stored position: the last viewer
// rebuilt (0 when none is in progress) and when it started.
func (s *Store) rebuildPosition(ctx context.Context, kind string) (int64, time.Time, error) {
	var after, startedUS int64
	err := s.reader.QueryRowContext(ctx, `SELECT seq, time_us FROM cursors WHERE kind = ?`, kind).Scan(&after, &startedUS)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("read rebuild position: %w", err)
	}
	return after, fromMicros(startedUS), nil
}

// RebuildPosition is where an unfinished rebuild of a feed stopped.
type RebuildPosition struct {
	Feed string
	// AfterViewer is the actor id of the last viewer rebuilt.
	AfterViewer int64
	Started     time.Time
	Updated     time.Time
}

// UnfinishedRebuilds lists the rebuilds begun and not finished: an
// operator's interrupted `appview rebuild`, or, in index_all mode, one
// queued when a feed gained a target. RebuildFeed resumes each.
func (s *Store) UnfinishedRebuilds(ctx context.Context) ([]RebuildPosition, error) {
	return s.rebuildPositions(ctx)
}

func (s *Store) rebuildPositions(ctx context.Context) ([]RebuildPosition, error) {
	rows, err := s.reader.QueryContext(ctx, `
		SELECT substr(kind, ?1), seq, time_us, updated_us FROM cursors WHERE kind LIKE ?2 ORDER BY kind`,
		len(rebuildCursorPrefix)+1, rebuildCursorPrefix+"%")
	if err != nil {
		return nil, fmt.Errorf("read rebuild positions: %w", err)
	}
	defer rows.Close()
	var out []RebuildPosition
	for rows.Next() {
		var p RebuildPosition
		var started, updated int64
		if err := rows.Scan(&p.Feed, &p.AfterViewer, &started, &updated); err != nil {
			return nil, err
		}
		p.Started, p.Updated = fromMicros(started), fromMicros(updated)
		out = append(out, p)
	}
	return out, rows.Err()
}
