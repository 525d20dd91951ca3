package feeds

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The database path goes into an SQLite URI, where '?', '#' and '%' are
// syntax: unescaped, "a#b.db" and "a?b.db" opened a file named "a" (the
// latter losing its first pragma, the busy timeout) and "a%41b.db" one
// named "aAb.db" (found by a review).
func TestDatabasePathIsTheFileOpened(t *testing.T) {
	for _, name := range []string{"a#b.db", "a?b.db", "a%41b.db", "a b.db"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, name)
			s, err := Open(context.Background(), Options{Path: path, Feeds: defaultFeeds})
			if err != nil {
				t.Fatal(err)
			}
			var busy int
			if err := s.writer.QueryRowContext(context.Background(), `PRAGMA busy_timeout`).Scan(&busy); err != nil {
				t.Fatal(err)
			}
			s.Close()
			if _, err := os.Stat(path); err != nil {
				entries, _ := os.ReadDir(dir)
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Fatalf("%v; the directory holds %q", err, names)
			}
			if busy != busyTimeoutMS {
				t.Errorf("busy_timeout %d, want %d", busy, busyTimeoutMS)
			}
		})
	}
}
