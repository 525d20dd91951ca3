package appview

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/dbpath"
)

// The operator lock, "<database.path>.ops.lock", keeps a migration from
// changing the schema under an operator command that opened the database
// at the older one. Each operator command (appview backfill, rebuild,
// cursor, audit) holds it shared for as long as its store is open; a
// migration takes it exclusively, without waiting:
//   - appview migrate is refused while a command holds it;
//   - a daemon starting then opens the database without migrating it
//     (feeds.Options.KeepSchema), and so starts only on a database at its
//     own schema;
//   - a command waits a moment for a migration or a daemon's open to give
//     it up, and is refused, saying why, if it is not given up in time.
//
// It is not the daemon lock, because operator commands run beside a
// daemon. Commands of builds made before this lock existed do not take
// it: stop those before an upgrade (README).
const opsLockSuffix = ".ops.lock"

// errOperatorCommandRunning says an operator command has the database
// open, so its schema must not change.
var errOperatorCommandRunning = errors.New("an operator command (appview backfill, rebuild, cursor, audit) has this database open")

// errMigrating says a migration, or a daemon opening the database, kept
// the operator lock past a command's wait.
var errMigrating = errors.New("the database's schema may be changing")

// operatorLockWait bounds a command's wait for the operator lock. A
// daemon's open holds it exclusively for one try at a time (up to SQLite's
// busy timeout, 5 s, unless it migrates), so a command started beside a
// restarting daemon goes on a moment later instead of failing; a
// migration of a large database holds it longer, and the command says so.
const operatorLockWait = 15 * time.Second

// operatorLockPoll is the pause between a waiting command's tries.
const operatorLockPoll = 100 * time.Millisecond

// lockAsOperator takes the operator lock shared, for a command's store,
// waiting for a migration or a daemon's open to give it up (at most
// patience, operatorLockWait for a command, or until ctx ends).
func lockAsOperator(ctx context.Context, dbPath string, patience time.Duration) (*fileLock, error) {
	wait, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	start := time.Now()
	for {
		l, held, err := tryLock(dbPath, opsLockSuffix, false)
		if err != nil || held {
			return l, err
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil { // a stop (Ctrl-C), not the wait's end
				return nil, fmt.Errorf("wait for the operator lock: %w", ctx.Err())
			}
			return nil, fmt.Errorf("%w: appview migrate, or a daemon opening the database, has held its operator lock (%s%s) for the %s this command waited; run it again once that is done",
				errMigrating, dbpath.Resolve(dbPath), opsLockSuffix, time.Since(start).Round(100*time.Millisecond))
		case <-time.After(operatorLockPoll):
		}
	}
}

// lockOperatorsOut takes the operator lock exclusively, for a migration;
// held is false while an operator command has the database open.
func lockOperatorsOut(dbPath string) (l *fileLock, held bool, err error) {
	return tryLock(dbPath, opsLockSuffix, true)
}

// untilClosed ties the operator lock to the store it guards: released at
// the store's Close, or at once if the store did not open (err).
func (l *fileLock) untilClosed(store *feeds.Store, err error) (*feeds.Store, error) {
	if err != nil {
		l.release()
		return nil, err
	}
	store.AfterClose(func() { l.release() })
	return store, nil
}
