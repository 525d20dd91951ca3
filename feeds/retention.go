package feeds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// retentionSlice bounds one retention slice: the records it examines and
// the tombstones it deletes.
const retentionSlice = 1000

// retentionProbeBudget bounds the feed-row probes of one retention slice.
// Checking that no feed holds a record seeks it in the lane of every
// follower of its author, so a slice of a popular author's records costs
// its followers times its records: 200 million seeks for a thousand posts
// by an author with 200,000 followers, in one write transaction. A slice
// ends where its records' probes would pass the budget, and holds at
// least one record, so retention always moves.
const retentionProbeBudget = 100_000

// retentionLapEvery spaces the retention scan's laps in event time, and
// a tenth of the window when that is shorter. A lap goes on from where the
// last one stopped, so it examines only the records that aged out since;
// records feeds still held when the scan passed them are examined again
// only by a full lap, from the start, once per tenth of the window (its
// due time is stored with the position, so a daemon restarted often still
// runs it). A record nobody holds thus outlives the window by at most a
// lap; one a feed held and let go, or one stored behind the position (a
// replay with an old time), by at most a tenth of the window. (Starting every
// lap from the start re-examined every held record each minute: at a few
// hundred thousand old records held by sparse feeds, seconds of the
// writer's time per minute.)
const retentionLapEvery = time.Minute

// retain runs one bounded retention slice. Age is measured in event time
// against the stream cursor, never the wall clock, so replaying a stream
// retires the same rows. Nothing new can age out while the stream time
// stands still, so an idle tick runs nothing unless the last slice was full.
//
// Records are scanned in (indexed_us, id) order from a stored position:
// records that feeds still hold are stepped over rather than examined again
// on every tick, so each slice costs the same however many old records
// feeds hold. When the scan reaches the cutoff the lap ends; the next
// starts retentionLapEvery of event time later, from the same position,
// or from the start when a full lap is due.
func (s *Store) retain(ctx context.Context, res *SweepResult) error {
	sw := &s.sweep
	nowUS := s.Cursor().TimeUS
	if nowUS == 0 || (!sw.retainMore && !sw.tombstonesMore && nowUS < sw.retainNextUS) {
		return nil
	}
	keepRecords, keepTombstones := sw.opts.Retention < 0, sw.opts.TombstoneWindow < 0
	if keepRecords && keepTombstones {
		return nil
	}
	// A tombstone backlog runs ticks of its own; the records wait for
	// their lap.
	recordsDue := !keepRecords && (sw.retainMore || nowUS >= sw.retainNextUS)
	fullLap := recordsDue && !sw.retainMore && nowUS >= sw.state.retainFullDueUS
	w, err := s.beginCounting(ctx, &res.LockWait)
	if err != nil {
		return err
	}
	defer w.tx.Rollback()
	st := *sw.state
	recordsMore, tombstonesMore := false, false
	if fullLap {
		st.retainAfterUS, st.retainAfterID = 0, 0
		st.retainFullDueUS = nowUS + max(sw.opts.Retention/10, retentionLapEvery).Microseconds()
	}

	var records int64
	if recordsDue {
		cutoff := nowUS - sw.opts.Retention.Microseconds()
		endUS, endID, full, n, err := w.retentionWindow(st.retainAfterUS, st.retainAfterID, cutoff, sw.probeBudget)
		if err != nil {
			return err
		}
		if n > 0 {
			records, err = w.retireRecords(st.retainAfterUS, st.retainAfterID, endUS, endID, cutoff)
			if err != nil {
				return err
			}
			st.retainAfterUS, st.retainAfterID = endUS, endID
		}
		recordsMore = full
		res.RecordsExamined = int64(n)
		if st.retainAfterUS != sw.state.retainAfterUS || st.retainAfterID != sw.state.retainAfterID ||
			st.retainFullDueUS != sw.state.retainFullDueUS {
			if _, err := w.exec(sw.stmts.saveRetain, st.retainAfterUS, st.retainAfterID, st.retainFullDueUS); err != nil {
				return fmt.Errorf("save retention position: %w", err)
			}
		}
	}

	var tombstones int64
	if !keepTombstones {
		cutoff := nowUS - sw.opts.TombstoneWindow.Microseconds()
		tombstones, err = w.exec(sw.stmts.retainTombstones, cutoff, retentionSlice)
		if err != nil {
			return fmt.Errorf("retire tombstones: %w", err)
		}
		tombstonesMore = tombstones == retentionSlice
	}

	if err := w.commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	sw.state = &st
	sw.retainMore, sw.tombstonesMore = recordsMore, tombstonesMore
	if !recordsMore && !tombstonesMore {
		lap := retentionLapEvery
		if tenth := sw.opts.Retention / 10; tenth > 0 && tenth < lap {
			lap = tenth
		}
		sw.retainNextUS = nowUS + lap.Microseconds()
	}
	res.RecordsRetired = records
	res.TombstonesRetired = tombstones
	s.metrics.observeRetention(res.RecordsExamined, records, tombstones)
	return nil
}

// retentionWindow finds where the slice after (afterUS, afterID) ends:
// after retentionSlice candidates, or before the candidate whose probes
// would take the slice past its budget; n is the candidates it holds.
// full is false when the window reaches the cutoff.
func (w *txWriter) retentionWindow(afterUS, afterID, cutoff, budget int64) (endUS, endID int64, full bool, n int, err error) {
	type candidate struct{ us, id, actor, coll int64 }
	rows, err := w.stmt(w.s.sweep.stmts.retainWindow).QueryContext(w.ctx, afterUS, afterID, cutoff, retentionSlice)
	if err != nil {
		return 0, 0, false, 0, fmt.Errorf("find retention window: %w", err)
	}
	var cands []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.us, &c.id, &c.actor, &c.coll); err != nil {
			rows.Close()
			return 0, 0, false, 0, fmt.Errorf("find retention window: %w", err)
		}
		cands = append(cands, c)
	}
	if err := errors.Join(rows.Close(), rows.Err()); err != nil {
		return 0, 0, false, 0, fmt.Errorf("find retention window: %w", err)
	}
	probes := map[[2]int64]int64{} // per author and collection
	var spent int64
	for i, c := range cands {
		k := [2]int64{c.actor, c.coll}
		cost, ok := probes[k]
		if !ok {
			if _, err := w.queryRow(w.s.sweep.stmts.retainProbes, []any{c.actor, c.coll, budget + 1}, &cost); err != nil {
				return 0, 0, false, 0, fmt.Errorf("count retention probes: %w", err)
			}
			probes[k] = cost
		}
		if i > 0 && spent+max(cost, 1) > budget {
			return cands[i-1].us, cands[i-1].id, true, i, nil
		}
		spent += max(cost, 1)
	}
	if len(cands) == 0 {
		return afterUS, afterID, false, 0, nil
	}
	last := cands[len(cands)-1]
	return last.us, last.id, len(cands) == retentionSlice, len(cands), nil
}

// retireRecords deletes the window's records that no feed holds, and marks
// the listings of their accounts incomplete: per-account backfill state
// must not claim records the store no longer has.
func (w *txWriter) retireRecords(afterUS, afterID, endUS, endID, cutoff int64) (int64, error) {
	type key struct{ actor, coll int64 }
	// A record is kept while its revision lies in [revCutoff, revAhead):
	// written since the cutoff, and not stamped more than a window past
	// the stream's time (see retainRecords).
	revCutoff, revAhead := "", ""
	if cutoff > 0 {
		revCutoff = syntax.NewTID(cutoff, 0).String()
		// A TID holds 53 bits of microseconds: a retention of a century
		// or more would wrap the bound round to the epoch.
		revAhead = syntax.NewTID(min(cutoff+2*w.s.sweep.opts.Retention.Microseconds(), 1<<53-1), 0).String()
	}
	rows, err := w.stmt(w.s.sweep.stmts.retainRecords).QueryContext(w.ctx, afterUS, afterID, endUS, endID, cutoff,
		revCutoff, revAhead)
	if err != nil {
		return 0, fmt.Errorf("retire records: %w", err)
	}
	var n int64
	var accounts []key
	seen := map[key]bool{}
	for rows.Next() {
		var k key
		var id int64
		if err := rows.Scan(&id, &k.actor, &k.coll); err != nil {
			rows.Close()
			return 0, fmt.Errorf("retire records: %w", err)
		}
		n++
		// No feed holds a retired record, but a page whose keys were
		// read before may still ask for it.
		w.recordChanged(id)
		if !seen[k] {
			seen[k] = true
			accounts = append(accounts, k)
		}
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("retire records: %w", err)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("retire records: %w", err)
	}
	for _, k := range accounts {
		if _, err := w.exec(w.s.sweep.stmts.retainListing, k.actor, k.coll); err != nil {
			return 0, fmt.Errorf("invalidate listing: %w", err)
		}
	}
	return n, nil
}
