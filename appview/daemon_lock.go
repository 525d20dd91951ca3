package appview

import (
	"errors"
	"fmt"
	"os"

	"github.com/atfeeds/appview/internal/dbpath"
)

// errDaemonRunning says another process holds the database's daemon lock.
var errDaemonRunning = errors.New("a daemon is running on this database")

// daemonLock is held by a running daemon on its database: an exclusive
// advisory lock on "<database.path>.lock", beside the file. A second
// daemon on the same database is refused, as is `appview migrate`, which
// must not upgrade the schema under the daemon of the build it replaces
// (docs/hostile.md). The kernel drops the lock when the process dies, so a
// crashed daemon never leaves it behind, and the file itself is left in
// place: removing it could race a daemon starting. The other operator
// commands run beside a daemon and do not take it. It is a separate file
// because SQLite's own locks on the database are byte ranges, which an
// advisory lock on the same file could meet on network file systems.
type daemonLock = fileLock

// lockDaemon takes the daemon lock of the database at dbPath, or fails
// with errDaemonRunning at once: it never waits.
func lockDaemon(dbPath string) (*daemonLock, error) {
	l, held, err := tryLock(dbPath, ".lock", true)
	if err != nil {
		return nil, err
	}
	if !held {
		return nil, fmt.Errorf("%w (%s.lock is held): stop it first", errDaemonRunning, dbpath.Resolve(dbPath))
	}
	return l, nil
}

// fileLock is an advisory lock on a file beside the database, held until
// released or the process ends.
type fileLock struct{ f *os.File }

// tryLock takes the lock on the database's file with the given suffix,
// exclusive or shared, without waiting; held is false when another
// process holds it in a mode that excludes this one.
func tryLock(dbPath, suffix string, exclusive bool) (l *fileLock, held bool, err error) {
	// Beside the file a symbolic link names, as SQLite keeps its -wal and
	// -shm files: a command given the link's path opens the same database
	// and must meet the same lock. Also when the file is not made yet:
	// resolved only once it existed, the first daemon locked beside the
	// link and every later process beside the file (a review).
	path := dbpath.Resolve(dbPath) + suffix
	// Read-only: an flock needs no write access, and the file, left in
	// place, may be another user's (an `appview migrate` run as root made
	// it), which the daemon's user can read but not write.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("open lock file: %w", err)
	}
	held, err = tryLockFile(f, exclusive)
	if err != nil || !held {
		f.Close()
		if err != nil {
			return nil, false, fmt.Errorf("take lock %s: %w", path, err)
		}
		return nil, false, nil
	}
	return &fileLock{f: f}, true, nil
}

// release drops the lock; nil-safe and idempotent.
func (l *fileLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor drops the lock
	l.f = nil
	return err
}
