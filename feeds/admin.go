package feeds

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// The operator's tools (appview cursor …, appview audit). They are safe
// while a daemon runs on the same file: each is one write transaction, and
// a reset bumps the cursor's generation, which the running daemon notices
// at its next commit (it cannot write over a reset) and follows.

// ErrNothingToReset is returned when a reset finds nothing stored.
var ErrNothingToReset = errors.New("nothing to reset")

// Change is recorded in the audit table by every reset.
type AuditEntry struct {
	Action, Target, Old, New, User string
	At                             time.Time
}

// ErrResetToFuture refuses a stream cursor reset past now: the stored
// cursor never moves back, so it would hold there, refusing every batch,
// and a restart would resume at the live tip.
var ErrResetToFuture = errors.New("cannot reset the stream cursor to a time in the future")

// ErrResetBeforeEpoch refuses a stream cursor reset to a time at or before
// 1970: stream times are positive, and the daemon takes a cursor that is
// not as "none" and starts at the live tip, skipping everything since the
// old cursor without the gap a reset to the live tip records.
var ErrResetBeforeEpoch = errors.New("cannot reset the stream cursor to a time at or before 1970-01-01")

// ResetJetstream moves the stream cursor to `to` (zero: forget it, so the
// daemon starts at the live tip) and bumps its generation. A reset that
// skips stream time (forward, or to the live tip) records it as a gap, in
// the same transaction: every viewer is rebuilt from the PDSes, as after
// downtime longer than the upstream keeps (RecordGap).
func (s *Store) ResetJetstream(ctx context.Context, to time.Time, user string, now time.Time) (AuditEntry, error) {
	if to.After(now) {
		return AuditEntry{}, fmt.Errorf("%w: %s is after %s", ErrResetToFuture, to.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	if !to.IsZero() && to.UnixMicro() <= 0 {
		return AuditEntry{}, fmt.Errorf("%w: %s", ErrResetBeforeEpoch, to.Format(time.RFC3339))
	}
	var e AuditEntry
	err := s.write(ctx, func(w *txWriter) error {
		cur, gen, err := readCursor(ctx, w.tx)
		if err != nil {
			return err
		}
		toUS := micros(to)
		if cur.TimeUS == 0 && gen == 0 {
			var n int
			if err := w.tx.QueryRowContext(ctx, `SELECT count(*) FROM cursors WHERE kind = ?`, cursorKindJetstream).Scan(&n); err != nil {
				return err
			}
			if n == 0 && toUS == 0 {
				return ErrNothingToReset // with no cursor the daemon starts at the live tip already
			}
			if n == 0 {
				// No daemon has stored a position yet: the reset sets the
				// first, so the daemon starts from it and not at the live
				// tip. Before, it said "nothing to reset" and set nothing
				// (a review of the docs against the code).
				if _, err := w.tx.ExecContext(ctx, `
					INSERT INTO cursors (kind, time_us, seq, host, generation, updated_us) VALUES (?1, ?2, 0, '', 1, ?3)`,
					cursorKindJetstream, toUS, now.UnixMicro()); err != nil {
					return fmt.Errorf("set cursor: %w", err)
				}
				e = AuditEntry{Action: "reset jetstream", Target: cursorKindJetstream,
					Old: "none", New: fmt.Sprintf("time_us=%d generation=1", toUS), User: user, At: now}
				return w.audit(e)
			}
		}
		if resumeUS := cmp.Or(toUS, now.UnixMicro()); cur.TimeUS > 0 && resumeUS > cur.TimeUS {
			gap := Gap{Detected: now, CursorUS: cur.TimeUS, Size: time.Duration(resumeUS-cur.TimeUS) * time.Microsecond}
			if _, err := w.recordGap(gap); err != nil {
				return err
			}
		}
		if _, err := w.tx.ExecContext(ctx, `
			UPDATE cursors SET time_us = ?2, seq = 0, host = '', generation = generation + 1, updated_us = ?3
			WHERE kind = ?1`, cursorKindJetstream, toUS, now.UnixMicro()); err != nil {
			return fmt.Errorf("reset cursor: %w", err)
		}
		e = AuditEntry{Action: "reset jetstream", Target: cursorKindJetstream,
			Old: fmt.Sprintf("time_us=%d seq=%d host=%s generation=%d", cur.TimeUS, cur.Seq, cur.Host, gen),
			New: fmt.Sprintf("time_us=%d generation=%d", toUS, gen+1), User: user, At: now}
		return w.audit(e)
	})
	return e, err
}

// ResetAccount starts an account's listings (one collection, or all when
// collection is empty) over in a new round, clearing failures: the next
// viewer who needs it fetches its backlog again.
func (s *Store) ResetAccount(ctx context.Context, account syntax.DID, collection syntax.NSID, user string, now time.Time) (AuditEntry, error) {
	// A collection no feed uses is an error, not "nothing to reset", even
	// for an account not stored, as a misspelt feed is in ResetViewer.
	var collID int64
	if collection != "" {
		var ok bool
		if collID, ok = s.collectionID(collection); !ok {
			return AuditEntry{}, fmt.Errorf("%w: no feed uses collection %q", ErrUnknownLane, collection)
		}
	}
	var e AuditEntry
	err := s.write(ctx, func(w *txWriter) error {
		id, found, err := w.existingActorID(account)
		if err != nil {
			return err
		}
		if !found {
			return ErrNothingToReset
		}
		q := `UPDATE listings SET ` + reopenListing + `,
			attempts = 0, last_error = '', next_retry_us = 0, gone = 0, updated_us = ?2 WHERE actor_id = ?1`
		args := []any{id, now.UnixMicro()}
		target := string(account)
		if collection != "" {
			q += ` AND collection_id = ?3`
			args = append(args, collID)
			target += " " + string(collection)
		}
		r, err := w.tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("reset listings: %w", err)
		}
		n, _ := r.RowsAffected()
		if n == 0 {
			return ErrNothingToReset
		}
		e = AuditEntry{Action: "reset account", Target: target, Old: fmt.Sprintf("%d listings", n), New: "new round", User: user, At: now}
		return w.audit(e)
	})
	return e, err
}

// ResetViewer makes a viewer's next read a first read again (one feed, or
// all when feed is empty), clearing its failures; its follow listing
// starts over. A running daemon trusts its in-memory "complete" mark for
// up to an hour.
func (s *Store) ResetViewer(ctx context.Context, viewer syntax.DID, feed, user string, now time.Time) (AuditEntry, error) {
	if feed != "" && !slices.ContainsFunc(s.lanes, func(l lane) bool { return l.feed == feed }) {
		return AuditEntry{}, fmt.Errorf("%w: no feed %q", ErrUnknownLane, feed)
	}
	var e AuditEntry
	err := s.write(ctx, func(w *txWriter) error {
		id, found, err := w.existingActorID(viewer)
		if err != nil {
			return err
		}
		if !found {
			return ErrNothingToReset
		}
		q := `UPDATE viewers SET state = 'pending', attempts = 0, last_error = '', next_retry_us = 0,
			claim_owner = '', claim_until_us = 0 WHERE actor_id = ?1`
		args := []any{id}
		target := string(viewer)
		if feed != "" {
			q += ` AND feed = ?2`
			args = append(args, feed)
			target += " " + feed
		}
		r, err := w.tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("reset viewer: %w", err)
		}
		n, _ := r.RowsAffected()
		if n == 0 {
			return ErrNothingToReset
		}
		if _, err := w.tx.ExecContext(ctx, `
			UPDATE listings SET `+reopenListing+`,
				attempts = 0, last_error = '', next_retry_us = 0, gone = 0
			WHERE actor_id = ? AND collection_id IN (SELECT follow_collection_id FROM feed_targets)`, id); err != nil {
			return fmt.Errorf("reset viewer follows listing: %w", err)
		}
		e = AuditEntry{Action: "reset viewer", Target: target, Old: fmt.Sprintf("%d feeds", n), New: "first read pending", User: user, At: now}
		return w.audit(e)
	})
	return e, err
}

func (w *txWriter) audit(e AuditEntry) error {
	_, err := w.tx.ExecContext(w.ctx, `
		INSERT INTO audit (action, target, old_value, new_value, at_us, os_user) VALUES (?, ?, ?, ?, ?, ?)`,
		e.Action, e.Target, e.Old, e.New, e.At.UnixMicro(), e.User)
	if err != nil {
		return fmt.Errorf("write audit: %w", err)
	}
	return nil
}

// Audit lists the audit log, newest first.
func (s *Store) Audit(ctx context.Context, limit int) ([]AuditEntry, error) {
	rows, err := s.reader.QueryContext(ctx, `
		SELECT action, target, old_value, new_value, at_us, os_user FROM audit ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		if err := rows.Scan(&e.Action, &e.Target, &e.Old, &e.New, &at, &e.User); err != nil {
			return nil, err
		}
		e.At = time.UnixMicro(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// CursorReport is what `appview cursor show` prints: the stream cursor
// with its generation, and the counts of the status page.
type CursorReport struct {
	Jetstream  StreamCursor
	Generation int64
	Counts
	// Rebuilds are the feed rebuilds interrupted before they finished.
	Rebuilds []RebuildPosition
}

// Report gathers the cursor report. It counts whole tables: an operator's
// command, not a request path.
func (s *Store) Report(ctx context.Context) (CursorReport, error) {
	var r CursorReport
	var err error
	if r.Jetstream, r.Generation, err = readCursor(ctx, s.reader); err != nil {
		return r, err
	}
	if r.Counts, err = s.Counts(ctx); err != nil {
		return r, err
	}
	r.Rebuilds, err = s.rebuildPositions(ctx)
	return r, err
}
