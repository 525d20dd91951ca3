package feeds

import (
	"context"
	"fmt"
	"os"
)

// SQLite's automatic checkpoint (PASSIVE, run by the commit that crosses
// wal_autocheckpoint) copies only the frames no reader still needs, and
// the WAL rewinds (and, with journal_size_limit, is truncated to
// walRestartFactor times the threshold) only once every frame was copied. Under a steady stream
// of writes and a steady stream of page reads that moment may never come
// (checkpoint starvation) and the WAL grows without bound. So when it has
// grown past walRestartFactor times its threshold, the writer runs a
// RESTART checkpoint: it waits (busy_timeout) for the readers of older
// snapshots to finish, which takes a page read's time, and the next
// commit starts the WAL over. TestWALStaysBoundedUnderContinuousWrites.
//
// A reader that holds one snapshot for long (a backup, a long query) keeps
// the RESTART from completing however long it waits, and it runs under
// the write lock, so each try waits at most restartBusyMS, and one that
// could not complete is not tried again before the WAL has grown by its
// threshold once more: else every commit would wait out the whole busy
// timeout, 5 s, and ingest would crawl
// (TestALongReaderDoesNotStallEveryCommit).
const walRestartFactor = 2

// restartBusyMS bounds a RESTART checkpoint's wait for readers.
const restartBusyMS = 250

// boundWAL restarts the WAL when it has outgrown its threshold. The caller
// holds writeMu and no transaction is open.
func (s *Store) boundWAL(ctx context.Context) {
	threshold := int64(walRestartFactor*s.walPages) * 4096
	fi, err := os.Stat(s.path + "-wal")
	if err != nil || fi.Size() < max(threshold, s.walRetryAt) {
		return
	}
	// Not cut short by the caller's context (a request's, a first
	// read's): an interrupted statement makes database/sql replace the
	// writer connection, and a restore not run would leave the short busy
	// timeout in place. restartBusyMS bounds the wait anyway.
	ctx = context.WithoutCancel(ctx)
	var busy, frames, copied int
	_, err = s.writer.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, restartBusyMS))
	if err == nil {
		err = s.writer.QueryRowContext(ctx, `PRAGMA wal_checkpoint(RESTART)`).Scan(&busy, &frames, &copied)
		if _, rerr := s.writer.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, busyTimeoutMS)); err == nil {
			err = rerr
		}
	}
	if err != nil || busy != 0 {
		s.walRetryAt = fi.Size() + threshold
		s.log.Warn("restart checkpoint did not complete: a reader holds an old snapshot",
			"wal_bytes", fi.Size(), "next_try_bytes", s.walRetryAt, "err", err)
		return
	}
	s.walRetryAt = 0
	s.metrics.walRestarted()
}
