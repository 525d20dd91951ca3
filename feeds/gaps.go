package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Gap is a stretch of the stream the daemon can no longer get: its stored
// cursor was older than the upstream's retention window at reconnect.
type Gap struct {
	Detected time.Time
	CursorUS int64
	Size     time.Duration
}

// RecordGap records a gap once per cursor position and marks every viewer
// for a rebuild: its next read is a first read again (bounded by the
// first-read admission like any other), and every account listing starts
// a new round, so the posts that fell into the gap are fetched from the
// PDSes lazily, viewer by viewer, never all at once, and the follows and
// records deleted during it are found missing from the listings and
// deleted (listing_reconcile.go). Stored handles and profiles are
// forgotten too: the identity events and profile changes in the gap are
// lost, so each is fetched again at its next read. It reports false when
// this cursor's gap was already recorded.
func (s *Store) RecordGap(ctx context.Context, g Gap) (bool, error) {
	recorded := false
	err := s.write(ctx, func(w *txWriter) error {
		var err error
		recorded, err = w.recordGap(g)
		return err
	})
	return recorded, err
}

func (w *txWriter) recordGap(g Gap) (bool, error) {
	var n int
	if err := w.tx.QueryRowContext(w.ctx, `SELECT count(*) FROM gaps WHERE cursor_us = ?`, g.CursorUS).Scan(&n); err != nil {
		return false, fmt.Errorf("check gaps: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	if err := w.forgetAllProfiles(); err != nil {
		return false, err
	}
	for _, q := range []string{
		`INSERT INTO gaps (detected_us, cursor_us, size_us) VALUES (?1, ?2, ?3)`,
		`UPDATE viewers SET state = 'pending', attempts = 0, next_retry_us = 0 WHERE state = 'complete'`,
		// A first read under way builds from follows and listings the gap
		// made stale: its claim goes, so it cannot complete (ErrClaimLost)
		// and the viewer's next read runs it again, from the reopened
		// listings. Else it completed with what it had found complete
		// before the gap, and was never rebuilt.
		`UPDATE viewers SET claim_owner = '', claim_until_us = 0 WHERE claim_owner <> ''`,
		// Every listing, not only the complete ones: pages a round in
		// progress (or failed, or gone) applied before the gap are as
		// stale as a finished round's. A run under way finds its next
		// page stale and starts the new round.
		`UPDATE listings SET ` + reopenListing + `,
			gone = 0, attempts = 0, last_error = '', next_retry_us = 0`,
	} {
		if _, err := w.tx.ExecContext(w.ctx, q, g.Detected.UnixMicro(), g.CursorUS, g.Size.Microseconds()); err != nil {
			return false, fmt.Errorf("record gap: %w", err)
		}
	}
	return true, w.newGapSince()
}

// gapWatch tells the daemon of gaps, whether it recorded them or an
// operator's cursor reset did in another process (seen when the daemon
// adopts the reset).
type gapWatch struct {
	mu     sync.Mutex
	lastID int64
	hooks  []func()
}

// OnGap adds f to what runs after a commit that recorded a gap, or adopted
// an operator's reset that recorded one. What the gap lost, a cache must
// not answer from: the identity events that would have purged cached
// identities one by one (Directory.PurgeAll), and the rebuild every viewer
// is due (the backfill's memory of complete viewers). The hooks run in the
// order added, before profile fetches begun earlier are counted as raced
// (identities.go), so a fetch that starts after that resolves afresh. They
// run under the store's write lock: they must not call into the store.
func (s *Store) OnGap(f func()) {
	s.gaps.mu.Lock()
	defer s.gaps.mu.Unlock()
	s.gaps.hooks = append(s.gaps.hooks, f)
}

// newGapSince reads whether the gaps table holds a gap newer than the
// last this store knew of, inside the transaction.
func (w *txWriter) newGapSince() error {
	var id int64
	if err := w.tx.QueryRowContext(w.ctx, `SELECT coalesce(max(id), 0) FROM gaps`).Scan(&id); err != nil {
		return fmt.Errorf("read gaps: %w", err)
	}
	w.s.gaps.mu.Lock()
	defer w.s.gaps.mu.Unlock()
	if id > w.s.gaps.lastID {
		w.gapID = id
	}
	return nil
}

// gapCommitted runs once a transaction that saw a new gap committed.
func (s *Store) gapCommitted(id int64) {
	s.gaps.mu.Lock()
	if id <= s.gaps.lastID {
		s.gaps.mu.Unlock()
		return
	}
	s.gaps.lastID = id
	hooks := s.gaps.hooks
	s.gaps.mu.Unlock()
	for _, hook := range hooks {
		hook()
	}
	s.identities.forgetAll()
}

// LastGap returns the newest recorded gap, if any.
func (s *Store) LastGap(ctx context.Context) (Gap, bool, error) {
	var g Gap
	var det, size int64
	err := s.reader.QueryRowContext(ctx, `SELECT detected_us, cursor_us, size_us FROM gaps ORDER BY id DESC LIMIT 1`).
		Scan(&det, &g.CursorUS, &size)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Gap{}, false, nil
		}
		return Gap{}, false, err
	}
	g.Detected, g.Size = time.UnixMicro(det), time.Duration(size)*time.Microsecond
	return g, true, nil
}
