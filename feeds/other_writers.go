package feeds

import (
	"context"
	"database/sql"
	"fmt"
)

// Other processes write to the file too: the operator commands (`appview
// backfill`, `rebuild`, `cursor`, …) run beside the daemon with
// connections of their own. Their commits never pass the daemon's writer,
// so the record cache (record_cache.go), which a commit tells of the
// records it changes, would go on serving a record another process edited
// or re-listed until it happened to be evicted.
//
// SQLite's data_version, read on a connection, changes when any other
// connection has committed since that connection last read it, and not
// for its own commits. The daemon's read connections never write, so on
// the writer connection a change means another process committed. The
// writer reads it at the start of every transaction and at every idle
// sweep tick (every sweep.idle_interval), and on a change
// forgets every cached record. The counter is the connection's own, and
// database/sql replaces a writer connection it finds broken
// (writer_conn.go): a new connection's first value cannot tell what was
// committed before it opened, so a new connection forgets every cached
// record too (TestTheRecordCacheForgetsWhatAnotherProcessChanged).

// rowQuerier is the writer's open transaction, or the writer pool when
// no transaction is open.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// noticeOtherWriters empties the record cache and the followed authors,
// and tells the sweep to read the grown queue again, when another
// connection committed since the last call. The caller holds writeMu.
func (s *Store) noticeOtherWriters(ctx context.Context, q rowQuerier) error {
	var v int64
	if err := q.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
		return fmt.Errorf("read data_version: %w", err)
	}
	// Loaded after the query, which opened the connection if it is new.
	conn := s.writerOpened.Load()
	changed := s.dataVersionConn != 0 && (conn != s.dataVersionConn || v != s.dataVersion)
	if changed {
		s.sweep.othersCommitted = true
		// Another process may have taken an author's last follow (an
		// operator's backfill whose listing found it deleted): the
		// author left scope in the file, and a follow here must see it
		// enter again and want its listings (enteredScope).
		clear(s.followed)
	}
	if changed && s.recordCache != nil {
		s.recordCache.forgetAll()
		s.metrics.recordCacheForgotAll()
	}
	s.dataVersion, s.dataVersionConn = v, conn
	return nil
}
