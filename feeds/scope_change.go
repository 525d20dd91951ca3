package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ScopeChange says how the configured collections differ from those the
// stored stream cursor was taken under.
type ScopeChange struct {
	Before, After  []string
	Added, Removed []string
}

// CheckScope compares the stream cursor's scope (the wanted collections
// it was taken under) with wanted. The live position is kept either way:
// what did not change goes on from it. A target collection added later has
// no backlog in the database, and Jetstream will not replay it from
// before the cursor; the viewers of the feeds that gained it were marked
// for a rebuild when the store opened (syncLanes), as for any lane new to
// its feed. Profiles
// (hydration turned on) need no rebuild: a read fetches the missing ones;
// turned off, the stored ones are forgotten, as they would go stale. The
// new scope is stored with the cursor. It returns nil when nothing changed
// or no cursor is stored yet.
func (s *Store) CheckScope(ctx context.Context, wanted []string) (*ScopeChange, error) {
	after := slices.Sorted(slices.Values(wanted))
	scope := strings.Join(after, ",")
	var change *ScopeChange
	err := s.write(ctx, func(w *txWriter) error {
		s.scope = scope // a cursor row created from now on carries it
		var stored string
		err := w.tx.QueryRowContext(ctx, `SELECT scope FROM cursors WHERE kind = ?`, cursorKindJetstream).Scan(&stored)
		found := err == nil
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
		if err != nil || !found || stored == scope {
			return err
		}
		if stored == "" {
			// A position taken under no recorded scope (a cursor from
			// before scopes were recorded, or one `appview cursor reset
			// jetstream --to` made): adopt this one, with nothing to
			// compare. This branch sat inside the one above and ran only
			// for an empty scope, so such a row was reported as every
			// collection added and "" removed.
			_, err = w.tx.ExecContext(ctx, `UPDATE cursors SET scope = ? WHERE kind = ?`, scope, cursorKindJetstream)
			return err
		}
		before := strings.Split(stored, ",")
		c := &ScopeChange{Before: before, After: after}
		for _, n := range after {
			if !slices.Contains(before, n) {
				c.Added = append(c.Added, n)
			}
		}
		for _, n := range before {
			if !slices.Contains(after, n) {
				c.Removed = append(c.Removed, n)
			}
		}
		if slices.Contains(c.Removed, string(ProfileCollection)) {
			// Profile hydration was turned off: the stream stops carrying
			// profiles, so what is stored would go stale. Turned on again,
			// profiles are fetched afresh as reads need them.
			for _, q := range []string{`DELETE FROM profiles`, `UPDATE actors SET handle = NULL WHERE handle IS NOT NULL`} {
				if _, err := w.tx.ExecContext(ctx, q); err != nil {
					return fmt.Errorf("forget profiles: %w", err)
				}
			}
		}
		if _, err := w.tx.ExecContext(ctx, `UPDATE cursors SET scope = ? WHERE kind = ?`, scope, cursorKindJetstream); err != nil {
			return fmt.Errorf("store cursor scope: %w", err)
		}
		change = c
		return nil
	})
	return change, err
}
