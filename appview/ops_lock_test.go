package appview

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
	"github.com/atfeeds/appview/schema"
)

// An operator command opens the database at the schema its build knows,
// and runs beside the daemon, so the daemon lock does not keep a
// migration from it: `appview migrate`, or the new build's daemon
// starting, changed the schema under a running `appview rebuild` of the
// build being replaced (suspected by a review of schema and migrations).
// Now a migration is refused while a command has the database open, a
// command is refused while a migration runs, and a daemon starts beside
// a command as before when there is nothing to migrate.
func TestAMigrationWaitsForTheOperatorCommandsThatHaveTheDatabaseOpen(t *testing.T) {
	if !advisoryLocks {
		t.Skip("no advisory locks on this platform")
	}
	ctx := context.Background()
	js := jetstreamtest.NewServer()
	t.Cleanup(js.Close)
	path := t.TempDir() + "/appview.db"
	cfg := testConfig(t, js, path)
	older := schema.Latest() - 1
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.MigrateTo(ctx, db, older); err != nil {
		t.Fatal(err)
	}
	version := func() int {
		t.Helper()
		v, err := schema.Version(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// A command of the build being replaced, which opened the database at
	// its schema and holds the operator lock as this build's commands do.
	command, err := lockAsOperator(ctx, path, operatorLockWait)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := MigrateStore(ctx, cfg); !errors.Is(err, errOperatorCommandRunning) {
		t.Errorf("migrate beside an operator command: %v, want it refused", err)
	}
	if d, err := Build(ctx, cfg, Options{Logger: testLogger(t)}); !errors.Is(err, errOperatorCommandRunning) || !errors.Is(err, feeds.ErrSchemaBehind) {
		if err == nil {
			d.Close(ctx)
		}
		t.Errorf("a new daemon starting beside an operator command on an older schema: %v, want it refused", err)
	}
	if v := version(); v != older {
		t.Fatalf("the schema changed to version %d under the command", v)
	}
	command.release()

	// A command waits for a migration (or a daemon's open) to give the
	// lock up, and is refused, saying why, when its wait ends first.
	migration, held, err := lockOperatorsOut(path)
	if err != nil || !held {
		t.Fatalf("take the operator lock for a migration: held %v, %v", held, err)
	}
	if l, err := lockAsOperator(ctx, path, 300*time.Millisecond); !errors.Is(err, errMigrating) {
		l.release()
		t.Errorf("an operator command whose wait ended during a migration: %v, want it refused", err)
	}
	stopped, stop := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, stop)
	if l, err := lockAsOperator(stopped, path, operatorLockWait); !errors.Is(err, context.Canceled) {
		l.release()
		t.Errorf("an operator command stopped while it waits: %v, want context.Canceled", err)
	}
	waited := make(chan error, 1)
	go func() {
		l, err := lockAsOperator(ctx, path, operatorLockWait)
		l.release()
		waited <- err
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-waited:
		t.Fatalf("a command took the operator lock from a migration: %v", err)
	default:
	}
	migration.release()
	if err := <-waited; err != nil {
		t.Errorf("a command waiting for a migration to end: %v", err)
	}

	if from, to, err := MigrateStore(ctx, cfg); err != nil || from != older || to != schema.Latest() {
		t.Fatalf("migrate once the command is done: %d → %d, %v", from, to, err)
	}

	// On a database at this build's schema, a command and a daemon run
	// side by side as before, and the command's Close gives the lock back.
	st, err := OpenStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, js, cfg)
	td.stop()
	if _, _, err := MigrateStore(ctx, cfg); !errors.Is(err, errOperatorCommandRunning) {
		t.Errorf("migrate with the command's store open: %v, want it refused", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := MigrateStore(ctx, cfg); err != nil {
		t.Errorf("migrate after the command closed its store: %v", err)
	}
}
