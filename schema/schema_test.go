package schema

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/s.db")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func version(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMigrateFromEmptyAndIsIdempotent(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	for range 2 {
		if err := Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		if got := version(t, db); got != Latest() || got == 0 {
			t.Fatalf("user_version = %d, want %d", got, Latest())
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'feed_items'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("feed_items table missing: %d, %v", n, err)
	}
}

// TestMigrateFromEachEarlierVersion applies the first k steps by hand, then
// lets Migrate finish: every older database upgrades.
func TestMigrateFromEachEarlierVersion(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k < len(ms); k++ {
		db := openDB(t)
		for _, m := range ms[:k] {
			if err := apply(context.Background(), db, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := Migrate(context.Background(), db); err != nil {
			t.Fatalf("upgrade from version %d: %v", k, err)
		}
		if got := version(t, db); got != Latest() {
			t.Fatalf("upgrade from %d ended at %d", k, got)
		}
	}
}

func TestNewerDatabaseIsRefused(t *testing.T) {
	db := openDB(t)
	if _, err := db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	err := Migrate(context.Background(), db)
	if err == nil || !strings.Contains(err.Error(), "newer than this build") {
		t.Fatalf("err = %v, want a refusal naming the newer version", err)
	}
}
