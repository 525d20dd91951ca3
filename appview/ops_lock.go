package appview

import (
	"errors"
	"fmt"

	"github.com/atfeeds/appview/feeds"
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
//   - a command is refused while a migration holds it.
//
// It is not the daemon lock, because operator commands run beside a
// daemon. Commands of builds made before this lock existed do not take
// it: stop those before an upgrade (README).
const opsLockSuffix = ".ops.lock"

// errOperatorCommandRunning says an operator command has the database
// open, so its schema must not change.
var errOperatorCommandRunning = errors.New("an operator command (appview backfill, rebuild, cursor, audit) has this database open")

// errMigrating says a migration holds the database.
var errMigrating = errors.New("the database's schema is being migrated")

// lockAsOperator takes the operator lock shared, for a command's store.
func lockAsOperator(dbPath string) (*fileLock, error) {
	l, held, err := tryLock(dbPath, opsLockSuffix, false)
	if err != nil {
		return nil, err
	}
	if !held {
		return nil, fmt.Errorf("%w (appview migrate, or a daemon starting): run the command again once it is done", errMigrating)
	}
	return l, nil
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
