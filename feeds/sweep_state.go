package feeds

import (
	"context"
	"database/sql"
	"fmt"
)

// sweepState mirrors the sweep_state row. The writer keeps a copy in
// memory, replaced only after the transaction that stored it commits.
type sweepState struct {
	cursorViewer  int64 // last viewer visited by the rolling cursor, 0 at a pass start
	passStartedUS int64 // clock time of the pass's first slice, 0 before it
	passRows      int64 // rows deleted by the pass so far
	lastPassEndUS int64 // 0: never, a pass is due at once
	lastPassLapUS int64
	lastPassRows  int64
	retainAfterUS int64 // retention scan position (indexed_us, id)
	retainAfterID int64
	// retainFullDueUS is the stream time at which the next retention lap
	// starts from the first record (0: at once).
	retainFullDueUS int64
}

func loadSweepState(ctx context.Context, db *sql.DB) (sweepState, error) {
	var st sweepState
	err := db.QueryRowContext(ctx, `
		SELECT cursor_viewer, pass_started_us, pass_rows,
			last_pass_end_us, last_pass_lap_us, last_pass_rows,
			retain_after_us, retain_after_id, retain_full_due_us
		FROM sweep_state WHERE id = 1`).Scan(
		&st.cursorViewer, &st.passStartedUS, &st.passRows,
		&st.lastPassEndUS, &st.lastPassLapUS, &st.lastPassRows,
		&st.retainAfterUS, &st.retainAfterID, &st.retainFullDueUS)
	if err != nil {
		return sweepState{}, fmt.Errorf("load sweep state: %w", err)
	}
	return st, nil
}

// saveSweepSQL stores the rolling part of the state; retention stores its
// own columns with saveRetainSQL.
const saveSweepSQL = `UPDATE sweep_state SET
	cursor_viewer = ?1, pass_started_us = ?2, pass_rows = ?3,
	last_pass_end_us = ?4, last_pass_lap_us = ?5, last_pass_rows = ?6
	WHERE id = 1`

const saveRetainSQL = `UPDATE sweep_state SET retain_after_us = ?1, retain_after_id = ?2, retain_full_due_us = ?3 WHERE id = 1`

func (w *txWriter) saveSweepState(st *sweepState) error {
	_, err := w.exec(w.s.sweep.stmts.saveSweep,
		st.cursorViewer, st.passStartedUS, st.passRows,
		st.lastPassEndUS, st.lastPassLapUS, st.lastPassRows)
	if err != nil {
		return fmt.Errorf("save sweep state: %w", err)
	}
	return nil
}
