package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// ViewerStatus is a viewer's first-read state for one feed.
type ViewerStatus struct {
	Complete   bool
	Attempts   int
	LastError  string
	NextRetry  time.Time
	ClaimOwner string
	ClaimUntil time.Time
	// LastRead is the stored last-read time, kept to LastReadResolution.
	LastRead time.Time
}

// LastReadResolution is how stale a viewer's last-read time may get before
// a read writes it again: at most one write per viewer per hour.
const LastReadResolution = time.Hour

// RegisterViewer makes the actor a viewer of the feed (its first read) or
// refreshes its last-read time, and returns its first-read state. From
// here on the viewer is in the fan-out audience of the feed.
func (s *Store) RegisterViewer(ctx context.Context, viewer syntax.DID, feed string, now time.Time) (ViewerStatus, error) {
	lanes, ok := s.lanesOf(feed)
	if !ok {
		return ViewerStatus{}, ErrUnknownLane
	}
	var st ViewerStatus
	err := s.write(ctx, func(w *txWriter) error {
		id, err := w.actorID(viewer)
		if err != nil {
			return err
		}
		followColl := lanes[0].followCollID
		viewing := s.indexAll // that mode keeps everyone's follows
		if !viewing {
			if viewing, err = w.viewsFollows(id, followColl); err != nil {
				return err
			}
		}
		if !viewing {
			// Its follows were not kept by the stream while it viewed no
			// enabled feed of this follow collection (one renamed or
			// dropped from the config left them, and their listing,
			// behind): the listing starts a new round, so its first read
			// lists them again rather than trust the stale ones
			// (TestAViewerOfARenamedFeedHasItsFollowsListedAgain).
			if _, err := w.tx.ExecContext(ctx, `UPDATE listings SET `+reopenListing+`
				WHERE actor_id = ? AND collection_id = ?`, id, followColl); err != nil {
				return fmt.Errorf("reopen follow listing: %w", err)
			}
		}
		nowUS := now.UnixMicro()
		if _, err := w.tx.ExecContext(ctx, `
			INSERT INTO viewers (actor_id, feed, registered_us, last_read_us) VALUES (?1, ?2, ?3, ?3)
			ON CONFLICT (actor_id, feed) DO UPDATE SET last_read_us = excluded.last_read_us
			WHERE viewers.last_read_us < excluded.last_read_us - ?4`,
			id, feed, nowUS, LastReadResolution.Microseconds()); err != nil {
			return fmt.Errorf("register viewer: %w", err)
		}
		if !s.viewers.has(viewer, feed) {
			// New to the set: counted in viewer_set_version (a known
			// viewer's read only moves last_read_us).
			w.viewerChanges = append(w.viewerChanges, viewerChange{viewer, feed, true})
		}
		st, err = readViewerStatus(ctx, w.tx, id, feed)
		return err
	})
	return st, err
}

func readViewerStatus(ctx context.Context, tx *sql.Tx, actorID int64, feed string) (ViewerStatus, error) {
	var st ViewerStatus
	var state string
	var nextUS, claimUS, lastUS int64
	err := tx.QueryRowContext(ctx, `
		SELECT state, attempts, last_error, next_retry_us, claim_owner, claim_until_us, last_read_us
		FROM viewers WHERE actor_id = ? AND feed = ?`, actorID, feed).
		Scan(&state, &st.Attempts, &st.LastError, &nextUS, &st.ClaimOwner, &claimUS, &lastUS)
	if err != nil {
		return st, fmt.Errorf("read viewer: %w", err)
	}
	st.Complete = state == "complete"
	st.NextRetry = fromMicros(nextUS)
	st.ClaimUntil = fromMicros(claimUS)
	st.LastRead = fromMicros(lastUS)
	return st, nil
}

// readViewerSQL is StoredViewer's query, prepared on the read pool.
const readViewerSQL = `
	SELECT v.state, v.last_read_us FROM viewers v JOIN actors a ON a.id = v.actor_id
	WHERE a.did = ? AND v.feed = ?`

// StoredViewer reads from the read pool, without waiting for the writer,
// whether the viewer's first read of the feed is complete and when its
// last read was stored (zero for an unknown viewer). A process that has
// just started knows no viewer yet, and a read that had to ask
// RegisterViewer would queue a write transaction behind the ingest
// batches: a page, a few milliseconds, would wait out a batch, seconds in
// catch-up (docs/benchmarks.md, fifteenth round).
func (s *Store) StoredViewer(ctx context.Context, viewer syntax.DID, feed string) (lastRead time.Time, complete bool, err error) {
	var state string
	var lastUS int64
	err = s.reads.viewer.QueryRowContext(ctx, string(viewer), feed).Scan(&state, &lastUS)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read viewer: %w", err)
	}
	return fromMicros(lastUS), state == "complete", nil
}

// ViewerTouch is a read of a complete viewer's feed whose last-read time
// is written later, by TouchViewers.
type ViewerTouch struct {
	Viewer syntax.DID
	Feed   string
	At     time.Time
}

// TouchViewers stores the last-read times of reads already served, in one
// write transaction. A viewer retired meanwhile stays retired (the row is
// gone, nothing is written), and a time never moves back.
func (s *Store) TouchViewers(ctx context.Context, touches []ViewerTouch) error {
	if len(touches) == 0 {
		return nil
	}
	return s.write(ctx, func(w *txWriter) error {
		// Parsed once for the batch, not once a viewer.
		touch, err := w.tx.PrepareContext(ctx, `
			UPDATE viewers SET last_read_us = ?3
			WHERE actor_id = (SELECT id FROM actors WHERE did = ?1) AND feed = ?2 AND last_read_us < ?3`)
		if err != nil {
			return fmt.Errorf("touch viewers: %w", err)
		}
		defer touch.Close()
		for _, t := range touches {
			if _, err := touch.ExecContext(ctx, string(t.Viewer), t.Feed, t.At.UnixMicro()); err != nil {
				return fmt.Errorf("touch viewer: %w", err)
			}
		}
		return nil
	})
}

// ClaimFirstRead takes the first-read run of (viewer, feed) for owner with
// a compare-and-swap on the marker row: it succeeds when nobody holds the
// claim, the holder's lease ran out (a crashed run), or owner already
// holds it. A complete viewer cannot be claimed.
func (s *Store) ClaimFirstRead(ctx context.Context, viewer syntax.DID, feed, owner string, now time.Time, lease time.Duration) (bool, error) {
	return s.setClaim(ctx, viewer, feed, owner, now, lease,
		`claim_owner = '' OR claim_owner = ?3 OR claim_until_us < ?4`)
}

// RenewFirstRead extends owner's claim on a first read to now+lease, if
// owner still holds it: unlike ClaimFirstRead it never takes a claim that
// was released, completed or taken over meanwhile.
func (s *Store) RenewFirstRead(ctx context.Context, viewer syntax.DID, feed, owner string, now time.Time, lease time.Duration) (bool, error) {
	return s.setClaim(ctx, viewer, feed, owner, now, lease, `claim_owner = ?3`)
}

// setClaim gives owner the claim until now+lease where the viewer is not
// complete and cond holds (?3 is owner, ?4 now in unix microseconds), and
// reports whether it did.
func (s *Store) setClaim(ctx context.Context, viewer syntax.DID, feed, owner string, now time.Time, lease time.Duration, cond string) (bool, error) {
	set := false
	err := s.write(ctx, func(w *txWriter) error {
		id, found, err := w.existingActorID(viewer)
		if err != nil || !found {
			return err
		}
		r, err := w.tx.ExecContext(ctx, `
			UPDATE viewers SET claim_owner = ?3, claim_until_us = ?5
			WHERE actor_id = ?1 AND feed = ?2 AND state <> 'complete' AND (`+cond+`)`,
			id, feed, owner, now.UnixMicro(), now.Add(lease).UnixMicro())
		if err != nil {
			return fmt.Errorf("claim first read: %w", err)
		}
		n, _ := r.RowsAffected()
		set = n == 1
		return nil
	})
	return set, err
}

// ErrClaimLost means another run took the first-read claim over (our
// lease ran out); the rows we wrote stay, since every write is idempotent.
var ErrClaimLost = errors.New("first-read claim lost")

// CompleteFirstRead builds the viewer's feed from the stored targets of
// its followees, newest first up to each lane's cap, one statement per
// lane, and marks the first read complete, in one transaction.
func (s *Store) CompleteFirstRead(ctx context.Context, viewer syntax.DID, feed, owner string, now time.Time) (int64, error) {
	lanes, ok := s.lanesOf(feed)
	if !ok {
		return 0, ErrUnknownLane
	}
	var rows int64
	err := s.write(ctx, func(w *txWriter) error {
		id, found, err := w.existingActorID(viewer)
		if err != nil {
			return err
		}
		if !found {
			return ErrClaimLost
		}
		if err := w.checkLanes(); err != nil {
			return err
		}
		if rows, err = w.buildViewerFeed(id, lanes); err != nil {
			return err
		}
		if rows > 0 {
			w.grewViewer(id)
		}
		r, err := w.tx.ExecContext(ctx, `
			UPDATE viewers SET state = 'complete', completed_us = ?4, claim_owner = '', claim_until_us = 0,
				last_error = '', next_retry_us = 0
			WHERE actor_id = ?1 AND feed = ?2 AND claim_owner = ?3`, id, feed, owner, now.UnixMicro())
		if err != nil {
			return fmt.Errorf("complete first read: %w", err)
		}
		if n, _ := r.RowsAffected(); n != 1 {
			return ErrClaimLost
		}
		w.res.MergedRows += rows
		return nil
	})
	return rows, err
}

// buildViewerFeed fills the viewer's lanes from what is stored, one
// statement per lane, and returns the rows written.
func (w *txWriter) buildViewerFeed(viewerID int64, lanes []*lane) (int64, error) {
	var rows int64
	for _, l := range lanes {
		r, err := w.tx.ExecContext(w.ctx, buildFeedSQL, viewerID, l.id, l.collectionID, l.followCollID, l.cap)
		if err != nil {
			return rows, fmt.Errorf("build feed %s: %w", l.feed, err)
		}
		n, _ := r.RowsAffected()
		rows += n
	}
	return rows, nil
}

// buildFeedSQL fills one lane of a viewer's feed from what is stored: the
// newest records of every distinct active account the viewer follows.
const buildFeedSQL = `
	INSERT OR IGNORE INTO feed_items (viewer_id, target_id, sort_us, record_id)
	SELECT ?1, ?2, r.sort_us, r.id
	FROM (SELECT DISTINCT subject_id FROM follows WHERE actor_id = ?1 AND collection_id = ?4 AND subject_id <> ?1) f
	JOIN actors a ON a.id = f.subject_id AND a.active = 1
	JOIN records r ON r.actor_id = f.subject_id AND r.collection_id = ?3
	ORDER BY r.sort_us DESC, r.id DESC
	LIMIT ?5`

// FailFirstRead records a failed first read (releasing the claim) so the
// next read retries it after nextRetry.
func (s *Store) FailFirstRead(ctx context.Context, viewer syntax.DID, feed, owner, reason string, nextRetry time.Time) error {
	return s.endFirstReadAttempt(ctx, viewer, feed, owner, reason, nextRetry, 1)
}

// DeferFirstRead puts off a first read that could not start its work (what
// it needs is not due yet) until nextRetry, releasing the claim, without
// counting an attempt.
func (s *Store) DeferFirstRead(ctx context.Context, viewer syntax.DID, feed, owner, reason string, nextRetry time.Time) error {
	return s.endFirstReadAttempt(ctx, viewer, feed, owner, reason, nextRetry, 0)
}

func (s *Store) endFirstReadAttempt(ctx context.Context, viewer syntax.DID, feed, owner, reason string, nextRetry time.Time, counted int) error {
	return s.write(ctx, func(w *txWriter) error {
		id, found, err := w.existingActorID(viewer)
		if err != nil || !found {
			return err
		}
		_, err = w.tx.ExecContext(ctx, `
			UPDATE viewers SET attempts = attempts + ?6, last_error = ?4, next_retry_us = ?5,
				claim_owner = '', claim_until_us = 0
			WHERE actor_id = ?1 AND feed = ?2 AND claim_owner = ?3`,
			id, feed, owner, truncate(reason, 512), nextRetry.UnixMicro(), counted)
		if err != nil {
			return fmt.Errorf("record failed first read: %w", err)
		}
		return nil
	})
}

// ReleaseFirstRead gives up owner's claim on a first read that stopped
// without an outcome (its context ended: a shutdown, an operator's Ctrl-C),
// without counting an attempt: the next run, in this process or another,
// goes on at once from the stored listing cursors instead of waiting for
// the lease to run out.
func (s *Store) ReleaseFirstRead(ctx context.Context, viewer syntax.DID, feed, owner string) error {
	return s.write(ctx, func(w *txWriter) error {
		id, found, err := w.existingActorID(viewer)
		if err != nil || !found {
			return err
		}
		if _, err := w.tx.ExecContext(ctx, `
			UPDATE viewers SET claim_owner = '', claim_until_us = 0
			WHERE actor_id = ?1 AND feed = ?2 AND claim_owner = ?3`, id, feed, owner); err != nil {
			return fmt.Errorf("release first read: %w", err)
		}
		return nil
	})
}

// MergeFollowee merges a followee's newest stored records into the
// viewer's registered lanes fed by the follow collection: the last step of
// fetching a newly followed account's backlog.
func (s *Store) MergeFollowee(ctx context.Context, viewer, subject syntax.DID, followCollection syntax.NSID) (int64, error) {
	collID, ok := s.followColls[followCollection]
	if !ok {
		return 0, ErrUnknownLane
	}
	var rows int64
	err := s.write(ctx, func(w *txWriter) error {
		v, found, err := w.existingActorID(viewer)
		if err != nil || !found {
			return err
		}
		sub, found, err := w.existingActorID(subject)
		if err != nil || !found {
			return err
		}
		// The viewer may have unfollowed while the backlog was fetched:
		// rows merged then would belong to no follow, and no unfollow or
		// delete would ever reach them.
		var one int
		follows, err := w.queryRow(w.s.stmts.followRemains, []any{sub, collID, v}, &one)
		if err != nil || !follows {
			return err
		}
		if err := w.followed(v, collID, sub); err != nil {
			return err
		}
		rows = w.res.MergedRows
		return nil
	})
	return rows, err
}

// write runs fn in one write transaction under writeMu and commits it. A
// catch-up's open batch commits early for it when ctx is Urgent
// (writer_wanted.go).
func (s *Store) write(ctx context.Context, fn func(w *txWriter) error) error {
	s.lockWriter(ctx)
	defer s.writeMu.Unlock()
	w, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer w.tx.Rollback()
	if err := fn(w); err != nil {
		return err
	}
	if err := w.commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// lanesOf returns the lanes of a feed.
func (s *Store) lanesOf(feed string) ([]*lane, bool) {
	var out []*lane
	for i := range s.lanes {
		if s.lanes[i].feed == feed {
			out = append(out, &s.lanes[i])
		}
	}
	return out, len(out) > 0
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
