package appview

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// An operator command beside the daemon (a rebuild's chunk, a backfill's
// page) may hold the write lock longer than the daemon's busy timeout.
// The ingest batch that could not begin is tried again, and the daemon
// goes on, where it used to stop with "database is locked" (found by a
// review of the operator commands).
func TestIngestWaitsOutAWriteLockHeldElsewhere(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	path := t.TempDir() + "/appview.db"
	td := startDaemon(t, js, testConfig(t, js, path))

	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1),
		jetstreamtest.Post(user("carol"), "p1", t0+2, "written while the lock was held elsewhere"),
	)
	// Past the busy timeout (5 s): the batch's begin has failed at least once.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(td.metrics(t), "appview_database_write_busy_total 1") {
		if time.Now().After(deadline) {
			t.Fatal("the daemon never found the write lock busy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	td.waitCursor(t, t0+2)
	if got := td.feed(t, user("alice")); !slices.Equal(got, []string{"p1"}) {
		t.Errorf("alice = %v, want [p1]", got)
	}
}
