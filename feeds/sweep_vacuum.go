package feeds

import (
	"context"
	"fmt"
)

// vacuum returns free pages to the file system with a bounded incremental
// vacuum. Pages freed by the sweep and retention are first reused by new
// rows (SQLite takes them from the freelist before growing the file), so a
// reserve of VacuumPages free pages is kept; only the surplus, at most
// VacuumPages per tick, is released. It runs after a tick freed rows, and
// keeps running on idle ticks until the surplus is gone.
func (s *Store) vacuum(ctx context.Context, freed bool, res *SweepResult) error {
	sw := &s.sweep
	if !sw.incremental || sw.opts.VacuumPages < 0 || (!freed && !sw.vacuumMore) {
		return nil
	}
	keep := int64(sw.opts.VacuumPages)
	free, err := s.freePages(ctx)
	if err != nil {
		return err
	}
	if free <= keep {
		sw.vacuumMore = false
		return nil
	}
	n := min(free-keep, keep)
	// PRAGMA takes no bound parameters; n is our own integer.
	if _, err := s.writer.ExecContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", n)); err != nil {
		if isBusy(err) {
			// Outside a transaction, so begin's mapping does not apply:
			// another process held the write lock past the busy
			// timeout. The tick is skipped as a slice's would be (a raw
			// SQLITE_BUSY stopped the daemon); vacuumMore is left set,
			// so a later tick goes on.
			s.metrics.wroteBusy()
			return fmt.Errorf("%w: %v", ErrWriteBusy, err)
		}
		return err
	}
	after, err := s.freePages(ctx)
	if err != nil {
		return err
	}
	// Two reads, no transaction around them: another process's commit
	// in between (an operator command's) may free pages, and a negative
	// difference would make the counter's Add panic (a review).
	res.VacuumedPages = max(0, free-after)
	sw.vacuumMore = after > keep
	s.metrics.observeVacuum(res.VacuumedPages)
	return nil
}

func (s *Store) freePages(ctx context.Context) (int64, error) {
	var n int64
	if err := s.writer.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read freelist: %w", err)
	}
	return n, nil
}
