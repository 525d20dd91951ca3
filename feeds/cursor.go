package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// cursorKindJetstream names the live stream's row in cursors.
const cursorKindJetstream = "jetstream"

func (s *Store) loadCursor(ctx context.Context) (StreamCursor, int64, error) {
	return readCursor(ctx, s.writer)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func readCursor(ctx context.Context, q queryer) (StreamCursor, int64, error) {
	var c StreamCursor
	var gen int64
	err := q.QueryRowContext(ctx,
		`SELECT time_us, seq, host, generation FROM cursors WHERE kind = ?`, cursorKindJetstream).
		Scan(&c.TimeUS, &c.Seq, &c.Host, &gen)
	if errors.Is(err, sql.ErrNoRows) {
		return StreamCursor{}, 0, nil
	}
	if err != nil {
		return StreamCursor{}, 0, fmt.Errorf("load stream cursor: %w", err)
	}
	return c, gen, nil
}

// saveCursor writes the stream cursor inside the batch transaction, as a
// compare-and-swap on the generation this daemon read: the WHERE clause
// keeps it from going backwards (a rewound replay after a reconnect
// carries older times) and refuses the write after an operator's reset
// bumped the generation, so a running daemon cannot undo a reset. It
// reports the stored cursor and generation when the generation moved: the
// caller adopts them and reconnects from there.
func (w *txWriter) saveCursor(c StreamCursor) (reset bool, err error) {
	_, err = w.tx.ExecContext(w.ctx, `
		INSERT INTO cursors (kind, time_us, seq, host, updated_us, generation, scope)
		VALUES (?1, ?2, ?3, ?4, ?2, ?5, ?6)
		ON CONFLICT (kind) DO UPDATE SET
			time_us = excluded.time_us, seq = excluded.seq,
			host = excluded.host, updated_us = excluded.updated_us
		WHERE excluded.time_us >= cursors.time_us AND cursors.generation = excluded.generation`,
		cursorKindJetstream, c.TimeUS, c.Seq, c.Host, w.s.generation, w.s.scope)
	if err != nil {
		return false, fmt.Errorf("save stream cursor: %w", err)
	}
	stored, gen, err := readCursor(w.ctx, w.tx)
	if err != nil {
		return false, err
	}
	if gen == w.s.generation {
		return false, nil
	}
	w.adopted = &stored
	w.adoptedGen = gen
	// A reset that skipped stream time recorded a gap in its own process.
	if err := w.newGapSince(); err != nil {
		return false, err
	}
	return true, w.claimScope()
}

// claimScope records this daemon's scope (CheckScope) on a cursor row
// that carries none: the one `appview cursor reset jetstream --to` makes
// on a database with no position, while this daemon ran without one.
// Left empty, the next start would take whatever scope it is configured
// with for the one the position was taken under, and a collection added
// meanwhile would not be reported (cursor_scope_changed at start).
func (w *txWriter) claimScope() error {
	if w.s.scope == "" {
		return nil
	}
	if _, err := w.tx.ExecContext(w.ctx, `UPDATE cursors SET scope = ? WHERE kind = ? AND scope = ''`, w.s.scope, cursorKindJetstream); err != nil {
		return fmt.Errorf("store cursor scope: %w", err)
	}
	return nil
}

// Cursor returns the last committed stream cursor.
func (s *Store) Cursor() StreamCursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

func (s *Store) advanceCursor(c StreamCursor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.TimeUS >= s.cursor.TimeUS {
		s.cursor = c
	}
}

// adoptCursor takes an operator's reset over: the stored position and its
// generation replace ours, even backwards.
func (s *Store) adoptCursor(c StreamCursor, gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cursor = c
	s.generation = gen
}

// FollowCursorReset adopts an operator's reset of the stream cursor that
// no commit of this daemon has met yet. ApplyBatch adopts a reset at the
// first batch after it, but a silent stream commits none: until an event
// came, /status and the cursor lag showed the position the reset
// replaced, and the consumer stayed connected past it. The daemon calls
// this on its idle ticks, with no batch open. It reports whether a reset
// was adopted; the caller then reconnects from the new position. Another
// process's commit is found with one read of the cursor row; only a
// generation that moved costs a write transaction, which notices the gap
// the reset may have recorded as a commit's adoption does.
func (s *Store) FollowCursorReset(ctx context.Context) (bool, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if _, gen, err := readCursor(ctx, s.writer); err != nil || gen == s.generation {
		return false, err
	}
	w, err := s.begin(ctx)
	if err != nil {
		return false, err
	}
	defer w.tx.Rollback()
	stored, gen, err := readCursor(w.ctx, w.tx)
	if err != nil || gen == s.generation {
		return false, err
	}
	if err := w.newGapSince(); err != nil {
		return false, err
	}
	if err := w.claimScope(); err != nil {
		return false, err
	}
	if err := w.commit(); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	s.adoptCursor(stored, gen)
	s.metrics.casMismatch(cursorKindJetstream)
	s.metrics.observeCursor(stored.TimeUS)
	s.log.Warn("cursor_reset_adopted", "time_us", stored.TimeUS, "generation", gen, "idle", true)
	return true, nil
}
