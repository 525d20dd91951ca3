package feeds

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
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

// boundWAL restarts the WAL when it holds at least its threshold. The
// caller holds writeMu and no transaction is open.
//
// What the WAL holds is counted in frames of the current generation, not
// read off the file's size: journal_size_limit leaves a rewound file at
// the threshold's size however little it holds, so the size would ask for
// a RESTART at every commit after the first
// (TestARewoundWALIsNotRestartedAtEveryCommit). The generation a RESTART
// emptied stays in the file, header and all, until the next commit that
// writes a page starts the WAL over; until then it holds nothing
// (TestACommitThatWritesNothingAfterARestartRestartsNothing). Frames a
// rolled-back transaction spilled past the last commit carry the
// generation's salts too and are counted, until overwritten: at worst one
// RESTART early.
func (s *Store) boundWAL(ctx context.Context) {
	threshold := int64(walRestartFactor * s.walThreshold())
	frames := max(threshold, s.walRetryFrames)
	full, gen, err := walHolds(s.path+"-wal", frames)
	if err != nil || !full || gen == s.walEmptied {
		if s.walRetryFrames > 0 && err == nil {
			// Once the WAL has rewound (the automatic checkpoint found
			// no reader in the way) a RESTART is due at the threshold
			// again, not at the length the failed one left
			// (TestAFailedRestartsBackOffEndsWhenTheWALRewinds).
			if over, _, err := walHolds(s.path+"-wal", threshold); err == nil && !over {
				s.walRetryFrames = 0
			}
		}
		return
	}
	// Not cut short by the caller's context (a request's, a first
	// read's): an interrupted statement makes database/sql replace the
	// writer connection, and a restore not run would leave the short busy
	// timeout in place. restartBusyMS bounds the wait anyway.
	ctx = context.WithoutCancel(ctx)
	var busy, logged, copied int
	_, err = s.writer.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, restartBusyMS))
	if err == nil {
		err = s.writer.QueryRowContext(ctx, `PRAGMA wal_checkpoint(RESTART)`).Scan(&busy, &logged, &copied)
		if _, rerr := s.writer.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, busyTimeoutMS)); err == nil {
			err = rerr
		}
	}
	if err != nil || busy != 0 {
		s.walRetryFrames = max(int64(logged), frames) + threshold
		s.log.Warn("restart checkpoint did not complete: a reader holds an old snapshot",
			"wal_frames", logged, "next_try_frames", s.walRetryFrames, "err", err)
		return
	}
	s.walRetryFrames = 0
	s.walEmptied = gen
	s.metrics.walRestarted()
}

// walGeneration names one generation of a WAL: the salts its header and
// every frame written in it carry. A rewind changes them.
type walGeneration [8]byte

// walHolds says whether the WAL file at path holds at least n frames
// written since it last rewound, and which generation that is. A rewind
// writes a new header with new salts, and every frame written after it
// carries them, so the n-th frame belongs to the current generation
// exactly when its salts match the header's
// (https://www.sqlite.org/fileformat.html#the_write_ahead_log). A missing
// or short file holds fewer.
func walHolds(path string, n int64) (held bool, gen walGeneration, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, gen, nil
	}
	if err != nil {
		return false, gen, err
	}
	defer f.Close()
	var header [walHeaderSize]byte
	if _, err := f.ReadAt(header[:], 0); err != nil {
		return false, gen, nil // not yet written: empty
	}
	copy(gen[:], header[16:24])
	if n <= 0 {
		return true, gen, nil
	}
	pageSize := int64(binary.BigEndian.Uint32(header[8:12]))
	var frame [walFrameHeaderSize]byte
	at := walHeaderSize + (n-1)*(walFrameHeaderSize+pageSize)
	if _, err := f.ReadAt(frame[:], at); err != nil {
		return false, gen, nil // the file ends before it
	}
	return bytes.Equal(frame[8:16], gen[:]), gen, nil
}

// The WAL's header and each frame's header, in bytes.
const (
	walHeaderSize      = 32
	walFrameHeaderSize = 24
)

// walThreshold is the writer's wal_autocheckpoint now, in pages.
func (s *Store) walThreshold() int {
	if s.walBacklog {
		return walBacklogFactor * s.walPages
	}
	return s.walPages
}

// walSizeLimit is the journal_size_limit that goes with a threshold of
// pages: a WAL file that rewinds is cut back to the RESTART bound.
func walSizeLimit(pages int) int64 {
	return int64(walRestartFactor) * int64(pages) * 4096
}

// setWALMode sets the writer's checkpoint threshold for a backlog's batch
// or a live one (walBacklogFactor), when it changes. The caller holds
// writeMu and no transaction is open.
func (s *Store) setWALMode(ctx context.Context, backlog bool) error {
	if n := s.writerOpened.Load(); n != s.walConn {
		// A new writer connection (database/sql replaces one a cancelled
		// statement broke) opened with the live threshold of its DSN.
		s.walBacklog, s.walConn = false, n
	}
	if backlog == s.walBacklog {
		return nil
	}
	pages := s.walPages
	if backlog {
		pages *= walBacklogFactor
	}
	if _, err := s.writer.ExecContext(ctx, fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", pages)); err != nil {
		return fmt.Errorf("set wal_autocheckpoint: %w", err)
	}
	if _, err := s.writer.ExecContext(ctx, fmt.Sprintf("PRAGMA journal_size_limit = %d", walSizeLimit(pages))); err != nil {
		return fmt.Errorf("set journal_size_limit: %w", err)
	}
	s.walBacklog = backlog
	return nil
}
