package feeds

import (
	"context"
	"fmt"
	"time"
)

// runSlice runs one slice of up to visits viewers in one transaction: up
// to half of them on queued grown feeds (grownShare), the rest on the
// viewers after the rolling cursor, each visited viewer's lanes trimmed
// to their caps. The new cursor and
// pass bookkeeping are stored in the same transaction as the deletes, so a
// crash never records work that was not done.
func (s *Store) runSlice(ctx context.Context, reason SweepReason, now int64, visits int, res *SweepResult) error {
	start := time.Now()
	sw := &s.sweep
	w, err := s.beginCounting(ctx, &res.LockWait)
	if err != nil {
		return err
	}
	defer w.tx.Rollback()
	st := *sw.state
	if reason != SweepIngest && sw.passDue(now) && st.passStartedUS != 0 && st.passStartedUS < sw.dueAt() {
		// The pass in progress began before this one fell due (the stream
		// went idle mid-lap, or the daemon restarted, perhaps with lower
		// caps): the viewers it already passed may be over cap again, so
		// the due pass starts over and visits every viewer. An idle tick
		// serving the grown queue starts it over too: carrying on the old
		// lap, its wrap would be recorded as the due pass, and the viewers
		// behind its cursor would wait another interval
		// (TestSweepAPassDueWhileTheGrownQueueIsBusyStartsOver). A busy
		// stream's slices carry on: its laps run back to back.
		st.cursorViewer, st.passStartedUS, st.passRows = 0, 0, 0
	}
	if st.passStartedUS == 0 {
		st.passStartedUS = now
	}
	var deleted int64

	visited := map[int64]bool{}
	// The grown queue walks at most its share of the visits; the viewers
	// it trimmed (a follower of two queued authors once) are the visits
	// it used, and the rest of the budget is the rolling cursor's.
	share, takesOdd := sw.grownShare(visits)
	if err := w.serveGrown(share, visited, &deleted); err != nil {
		return err
	}
	grown := len(visited)
	// The rest of the budget goes to the rolling cursor. Viewers the grown
	// queue just trimmed are passed over without a second visit, so a
	// deployment with fewer viewers than the budget is trimmed whole by
	// every slice.
	budget := visits - grown
	ids, err := w.nextViewers(st.cursorViewer, budget+grown+1)
	if err != nil {
		return err
	}
	rolled, consumed := 0, 0
	for _, v := range ids {
		if rolled == budget {
			break
		}
		consumed++
		st.cursorViewer = v
		if visited[v] {
			continue
		}
		n, err := w.trimViewer(v)
		if err != nil {
			return err
		}
		deleted += n
		rolled++
	}
	// Every viewer returned was consumed only if the query ran out of
	// viewers before its limit: the cursor passed the last one.
	wrapped := consumed == len(ids)
	st.passRows += deleted
	if wrapped {
		st.lastPassEndUS = now
		st.lastPassLapUS = now - st.passStartedUS
		st.lastPassRows = st.passRows
		st.cursorViewer, st.passStartedUS, st.passRows = 0, 0, 0
	}
	if err := w.saveSweepState(&st); err != nil {
		return err
	}
	var pending int
	if _, err := w.queryRow(sw.stmts.grownExists, nil, &pending); err != nil {
		return fmt.Errorf("read grown queue: %w", err)
	}
	if err := w.commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	sw.state = &st
	sw.grownPending = pending == 1
	sw.grownTakesOdd = takesOdd

	res.Reason = reason
	res.Viewers = grown + rolled
	res.GrownViewers = grown
	res.RowsDeleted = deleted
	res.PassEnded = wrapped
	s.metrics.observeSlice(reason, res.Viewers, deleted, time.Since(start))
	if wrapped {
		s.metrics.observePass(st)
		s.log.Debug("sweep pass ended", "lap", time.Duration(st.lastPassLapUS)*time.Microsecond, "rows_deleted", st.lastPassRows)
	}
	return nil
}

// nextViewers returns up to limit viewers after the cursor, in viewer
// order.
func (w *txWriter) nextViewers(after int64, limit int) ([]int64, error) {
	ids, err := w.queryIDs(w.s.sweep.stmts.nextViewers, after, limit)
	if err != nil {
		return nil, fmt.Errorf("next viewers: %w", err)
	}
	return ids, nil
}

// trimViewer holds each of the viewer's lanes to its cap, newest kept, and
// empties lanes that left the configuration.
func (w *txWriter) trimViewer(viewerID int64) (int64, error) {
	st := w.s.sweep.stmts
	var deleted int64
	for i := range w.s.lanes {
		l := &w.s.lanes[i]
		var sortUS, recordID int64
		over, err := w.queryRow(st.cutoff, []any{viewerID, l.id, l.cap}, &sortUS, &recordID)
		if err != nil {
			return 0, fmt.Errorf("find cutoff of feed %s %s: %w", l.feed, l.collection, err)
		}
		if !over {
			continue
		}
		n, err := w.exec(st.trim, viewerID, l.id, sortUS, recordID)
		if err != nil {
			return 0, fmt.Errorf("trim feed %s %s: %w", l.feed, l.collection, err)
		}
		deleted += n
	}
	for _, id := range w.s.sweep.disabledLanes {
		n, err := w.exec(st.clearLane, viewerID, id)
		if err != nil {
			return 0, fmt.Errorf("clear disabled lane %d: %w", id, err)
		}
		deleted += n
	}
	return deleted, nil
}
