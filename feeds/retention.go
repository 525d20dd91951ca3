package feeds

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
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
// only by a full lap, from the start, once per tenth of the window. A
// record nobody holds thus outlives the window by at most a lap; one a
// feed held and let go, by at most a tenth of the window. (Starting every
// lap from the start re-examined every held record each minute: at a few
// hundred thousand old records held by sparse feeds, seconds of the
// writer's time per minute.)
const retentionLapEvery = time.Minute

// retain runs one bounded retention slice. Age is measured in event time
// against the stream cursor, never the wall clock, so replaying a stream
// retires the same rows. Nothing new can age out while the stream time
// stands still, so an idle tick runs nothing unless the last slice was full.
//
// Records are scanned in id order from a stored position: records that
// feeds still hold are stepped over rather than examined again on every
// tick, so each slice costs the same however many old records feeds hold.
// Ids grow with insertion and so, but for replays and records stamped
// with their own time, do indexed times: the position stops before the
// first record still inside the window, and the lap ends there, though
// the slice retires old records up to retentionSlice past it
// (retentionWindow). The next lap starts retentionLapEvery of event time
// later, from the same position, or from the start when a full lap is
// due.
func (s *Store) retain(ctx context.Context, res *SweepResult) error {
	sw := &s.sweep
	nowUS := s.Cursor().TimeUS
	if nowUS == 0 || (!sw.retainMore && !sw.tombstonesMore && nowUS < sw.retainNextUS) {
		return nil
	}
	// The full lap's due time is stored with the position: a daemon
	// restarted more often than a tenth of the window still runs it.
	fullLap := !sw.retainMore && nowUS >= sw.state.retainFullDueUS
	keepRecords, keepTombstones := sw.opts.Retention < 0, sw.opts.TombstoneWindow < 0
	if keepRecords && keepTombstones {
		return nil
	}
	w, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer w.tx.Rollback()
	st := *sw.state
	recordsMore, tombstonesMore := false, false
	if fullLap {
		st.retainAfterID = 0
		st.retainFullDueUS = nowUS + max(sw.opts.Retention/10, retentionLapEvery).Microseconds()
	}

	var records int64
	if !keepRecords {
		cutoff := nowUS - sw.opts.Retention.Microseconds()
		end, pos, more, n, err := w.retentionWindow(st.retainAfterID, cutoff, sw.probeBudget)
		if err != nil {
			return err
		}
		if n > 0 {
			records, err = w.retireRecords(st.retainAfterID, end, cutoff)
			if err != nil {
				return err
			}
		}
		// A record id past the last one stored is handed out again (the
		// table has no AUTOINCREMENT): the position must not stand past
		// the next new record.
		var last int64
		if _, err := w.queryRow(sw.stmts.lastRecordID, nil, &last); err != nil {
			return fmt.Errorf("read last record id: %w", err)
		}
		st.retainAfterID = min(pos, last)
		recordsMore = more
		res.RecordsExamined = int64(n)
		if st.retainAfterID != sw.state.retainAfterID || st.retainFullDueUS != sw.state.retainFullDueUS {
			if _, err := w.exec(sw.stmts.saveRetain, st.retainAfterID, st.retainFullDueUS); err != nil {
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

// retentionWindow reads up to retentionSlice records after afterID, in id
// order, and finds the slice's range (afterID, end] and where the scan
// position goes. Records past the window (indexed before cutoff) are the
// candidates; the range ends before the candidate whose probes would take
// the slice past its budget (it keeps at least one). A record still inside
// the window does not end the range: records stored after it may be old
// (a replay), and the range goes on over it to the end of what was read.
// But the position does not pass a stream record inside the window, so the
// next lap looks at it again, and the lap ends with the slice (more is
// false). n counts candidates.
//
// A listed or notified record (no stream rev) is stamped with its own
// time, later than the stream's while the stream catches up: as the
// position's stop it would hold back everything stored after it for as
// long. The position passes it; a full lap comes back to it.
func (w *txWriter) retentionWindow(afterID, cutoff, budget int64) (end, pos int64, more bool, n int, err error) {
	type candidate struct{ id, actor, coll int64 }
	rows, err := w.stmt(w.s.sweep.stmts.retainWindow).QueryContext(w.ctx, afterID, retentionSlice)
	if err != nil {
		return 0, 0, false, 0, fmt.Errorf("find retention window: %w", err)
	}
	var cands []candidate
	read, end, firstYoung := 0, afterID, int64(0)
	for rows.Next() {
		var c candidate
		var us int64
		var rev string
		if err := rows.Scan(&c.id, &us, &c.actor, &c.coll, &rev); err != nil {
			rows.Close()
			return 0, 0, false, 0, fmt.Errorf("find retention window: %w", err)
		}
		read, end = read+1, c.id
		switch {
		case us < cutoff:
			cands = append(cands, c)
		case firstYoung == 0 && streamRev(rev):
			firstYoung = c.id
		}
	}
	if err := errors.Join(rows.Close(), rows.Err()); err != nil {
		return 0, 0, false, 0, fmt.Errorf("find retention window: %w", err)
	}
	more = read == retentionSlice
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
			end, more, cands = cands[i-1].id, true, cands[:i]
			break
		}
		spent += max(cost, 1)
	}
	pos = end
	if firstYoung != 0 && firstYoung <= end {
		pos, more = firstYoung-1, false
	}
	return end, pos, more, len(cands), nil
}

// streamRev reports whether a record's rev came with a stream commit: a
// listed record has none, a notified one a read-time suffix (notifiedRev).
func streamRev(rev string) bool {
	return rev != "" && !strings.Contains(rev, ".")
}

// retireRecords deletes the window's records that no feed holds, and marks
// the listings of their accounts incomplete: per-account backfill state
// must not claim records the store no longer has.
func (w *txWriter) retireRecords(afterID, endID, cutoff int64) (int64, error) {
	type key struct{ actor, coll int64 }
	rows, err := w.stmt(w.s.sweep.stmts.retainRecords).QueryContext(w.ctx, afterID, endID, cutoff)
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
		// No feed holds a retired record, but its id may be handed out
		// again.
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
