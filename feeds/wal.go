package feeds

import (
	"context"
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
const walRestartFactor = 2

// boundWAL restarts the WAL when it has outgrown its threshold. The caller
// holds writeMu and no transaction is open.
func (s *Store) boundWAL(ctx context.Context) {
	fi, err := os.Stat(s.path + "-wal")
	if err != nil || fi.Size() < int64(walRestartFactor*s.walPages)*4096 {
		return
	}
	if _, err := s.writer.ExecContext(ctx, `PRAGMA wal_checkpoint(RESTART)`); err != nil {
		s.log.Warn("restart checkpoint", "wal_bytes", fi.Size(), "err", err)
		return
	}
	s.metrics.walRestarted()
}
