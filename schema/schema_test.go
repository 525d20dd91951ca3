package schema

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

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
	v, err := Version(context.Background(), db)
	if err != nil {
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

// TestMigrateFromEachEarlierVersion applies the first k steps (MigrateTo),
// then lets Migrate finish: every older database upgrades.
func TestMigrateFromEachEarlierVersion(t *testing.T) {
	for k := 1; k < Latest(); k++ {
		db := openDB(t)
		if err := MigrateTo(context.Background(), db, k); err != nil {
			t.Fatal(err)
		}
		if got := version(t, db); got != k {
			t.Fatalf("MigrateTo(%d) ended at %d", k, got)
		}
		if err := MigrateTo(context.Background(), db, k-1); err != nil || version(t, db) != k {
			t.Fatalf("MigrateTo(%d) on a database at %d: err %v, version %d; want nothing done", k-1, k, err, version(t, db))
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

// TestRecordsByKeyLeadsWithTheRKey: version 9 rebuilds records_by_key with
// the rkey first (new TIDs land at its end) and keeps its promise: one
// record per (author, collection, rkey), whatever the column order.
func TestRecordsByKeyLeadsWithTheRKey(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	db := openDB(t)
	ctx := context.Background()
	for _, m := range ms[:8] {
		if err := apply(ctx, db, m); err != nil {
			t.Fatal(err)
		}
	}
	insert := `INSERT INTO records (actor_id, collection_id, rkey, cid, rev, sort_us, indexed_us, created_us, body)
		VALUES (?, 1, ?, 'c', 'r', 1, 1, 1, '{}')`
	for _, r := range []struct {
		actor int
		rkey  string
	}{{1, "3kaaaaaaaaaa2"}, {2, "3kaaaaaaaaaa2"}, {1, "3kbbbbbbbbbb2"}} {
		if _, err := db.Exec(insert, r.actor, r.rkey); err != nil {
			t.Fatal(err)
		}
	}
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	var cols []string
	rows, err := db.Query(`SELECT name FROM pragma_index_info('records_by_key') ORDER BY seqno`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	if got, want := strings.Join(cols, ","), "rkey,actor_id,collection_id"; got != want {
		t.Errorf("records_by_key columns %s, want %s", got, want)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM records`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d records after the upgrade (%v), want the 3 stored before", n, err)
	}
	if _, err := db.Exec(insert, 2, "3kaaaaaaaaaa2"); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Errorf("a second record under a stored key: %v, want a UNIQUE violation", err)
	}
	if _, err := db.Exec(insert, 2, "3kbbbbbbbbbb2"); err != nil {
		t.Errorf("another author's record under the same rkey: %v, want it stored", err)
	}
}

// TestTwoProcessesMigratingOneFileBothSucceed: the version is read before
// a step's transaction, so a process that read it while another held the
// write lock applied steps the other had applied meanwhile ("table actors
// already exists"), failing a daemon that started as an operator command
// (appview backfill) made the file. Each step reads the version again
// under the write lock and leaves a step already applied as it is.
func TestTwoProcessesMigratingOneFileBothSucceed(t *testing.T) {
	path := t.TempDir() + "/s.db"
	open := func() *sql.DB {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		return db
	}
	ctx := context.Background()
	holder := open()
	tx, err := holder.BeginTx(ctx, nil) // holds the write lock: both read version 0, then wait
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		db := open()
		go func() { errs <- Migrate(ctx, db) }()
	}
	time.Sleep(200 * time.Millisecond)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("migrate beside another: %v", err)
		}
	}
	if got := version(t, holder); got != Latest() {
		t.Fatalf("user_version = %d, want %d", got, Latest())
	}
}

// Step 0018 marks the statuses stored before it as time_us values (-1):
// the account's next event is compared by its own time_us
// (feeds.AccountStatus.newerStatus). An actor with no status stored keeps 0.
func TestMigration18MarksStoredStatusesAsTimeUS(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	if err := MigrateTo(ctx, db, 17); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO actors (did, status_us) VALUES ('did:plc:a', 1800000000000000), ('did:plc:b', 0)`); err != nil {
		t.Fatal(err)
	}
	if err := MigrateTo(ctx, db, 18); err != nil {
		t.Fatal(err)
	}
	for did, want := range map[string]int64{"did:plc:a": -1, "did:plc:b": 0} {
		var seq int64
		if err := db.QueryRow(`SELECT status_seq FROM actors WHERE did = ?`, did).Scan(&seq); err != nil || seq != want {
			t.Errorf("%s: status_seq = %d, %v; want %d", did, seq, err, want)
		}
	}
}
