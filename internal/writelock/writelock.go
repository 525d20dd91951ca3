// Package writelock holds a SQLite database's write lock in tests, from a
// connection of its own, as an operator command's long transaction beside
// the daemon would.
package writelock

import (
	"context"
	"database/sql"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// Hold takes the write lock of the database at path until release (or
// the test's end).
func Hold(t testing.TB, path string) (release func()) {
	t.Helper()
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
	}
}
