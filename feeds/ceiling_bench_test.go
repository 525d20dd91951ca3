package feeds

import (
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkFeedRowsCeiling measures the most a feed table can take on this
// machine, for the ingest bar of issue 7 (20,000 events/s with 10,000
// viewers following 200 accounts each, about 16 feed rows an event): the
// feed rows alone, written and trimmed as cheaply as SQLite allows, with
// nothing else in the file and none of the daemon's bookkeeping.
//
// The table is the store's feed_items cut down to three integer columns
// (WITHOUT ROWID, primary key only) and holds a steady 1.92M rows: 10,000
// viewers at a cap of about 192. Each transaction is one catch-up batch of
// `events` events: it inserts 16 rows an event for viewers picked
// pseudo-randomly, in key order, in one INSERT … SELECT; deletes every
// viewer's rows older than the batch twelve batches back, which are
// exactly the rows that batch inserted, with one range delete a viewer at
// the front of the viewer's rows (an ideal trim: the cutoff is known, no
// walk finds it); and commits, with the store's pragmas and a 64 MiB
// cache. So each batch is the least any design storing feed rows in
// SQLite must do.
//
// (A first version deleted the old batch's rows by key, one seek a row:
// 10,000–12,000 events/s with one writer, against 18,000 with the range
// deletes. What a delete costs depends on how it finds its rows.)
//
// events/s is the ceiling that leaves no time for records, follows,
// cursors or decoding. With writers=2 each writer has its own file and
// half the viewers, as if feed rows were split over two databases with a
// writer each; it says what the second core can add.
//
//	go test ./feeds -run '^$' -bench FeedRowsCeiling -benchtime 10x
func BenchmarkFeedRowsCeiling(b *testing.B) {
	const (
		viewers      = ceilingViewers
		rowsPerEvent = ceilingRowsPerEvent
		keptBatches  = ceilingKeptBatches
	)
	for _, writers := range []int{1, 2} {
		for _, events := range []int{10_000, 30_000} {
			b.Run(fmt.Sprintf("writers=%d/events=%d", writers, events), func(b *testing.B) {
				// Every writer keeps the same rows a batch: its share of
				// the viewers at the same cap.
				perWriter := events * rowsPerEvent / writers
				perWriterViewers := viewers / writers
				dbs := make([]*sql.DB, writers)
				for i := range dbs {
					dbs[i] = ceilingDB(b, fmt.Sprintf("%s/w%d.db", b.TempDir(), i), perWriterViewers, perWriter, keptBatches)
				}
				var took time.Duration
				round := keptBatches
				for b.Loop() {
					start := time.Now()
					var wg sync.WaitGroup
					errs := make([]error, writers)
					for w, db := range dbs {
						wg.Go(func() { errs[w] = ceilingBatch(db, round, perWriter, perWriterViewers, keptBatches) })
					}
					wg.Wait()
					took += time.Since(start)
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
					round++
				}
				rows := float64(b.N * events * rowsPerEvent)
				b.ReportMetric(rows/took.Seconds(), "rows/s")
				b.ReportMetric(float64(b.N*events)/took.Seconds(), "events/s")
			})
		}
	}
}

// The workload of the feed-row benchmarks (this one, FeedRowsGenerations,
// FeedRowsPacked), shared so their figures compare: 10,000 viewers, 16
// feed items an event (the bench stream's mean at that size), 12 batches
// kept.
const (
	ceilingViewers      = 10_000
	ceilingRowsPerEvent = 16
	ceilingKeptBatches  = 12
)

// ceilingRows selects batch round's rows: n rows, each (viewer, sort key,
// record) with a pseudo-random viewer below viewers and a sort key and
// record id that grow with the round, in key order.
func ceilingRows(n, viewers int) string {
	return fmt.Sprintf(`WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < %d)
		SELECT ((?1 * %d + i) * 2654435761) %% 4294967296 %% %d, ?1 * %d + i, ?1 * %d + i FROM seq ORDER BY 1, 2, 3`,
		n-1, n, viewers, n, n)
}

// ceilingWriter opens path as a feed-rows-only writer: the store's
// pragmas, a 64 MiB cache, one connection.
func ceilingWriter(b *testing.B, path string) *sql.DB {
	b.Helper()
	db, err := sql.Open("sqlite", dsn(path, false)+"&_pragma=cache_size(-65536)&_pragma=wal_autocheckpoint(16384)")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	return db
}

func ceilingDB(b *testing.B, path string, viewers, perBatch, kept int) *sql.DB {
	b.Helper()
	db := ceilingWriter(b, path)
	if _, err := db.Exec(`CREATE TABLE feed (v INTEGER, s INTEGER, r INTEGER, PRIMARY KEY (v, s, r)) WITHOUT ROWID`); err != nil {
		b.Fatal(err)
	}
	for round := range kept {
		if _, err := db.Exec(`INSERT INTO feed `+ceilingRows(perBatch, viewers), round); err != nil {
			b.Fatal(err)
		}
	}
	return db
}

// ceilingBatch writes one batch: round's rows in, round-kept's rows out
// (every sort key below round-kept+1's first), one commit.
func ceilingBatch(db *sql.DB, round, perBatch, viewers, kept int) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// OR IGNORE, as the daemon's fan-out. A plain INSERT … SELECT in a
	// transaction might abort halfway on a duplicate key, so SQLite copies
	// every page it touches to a statement journal first (memory malloc'd
	// and freed a page at a time), which the daemon's statements never
	// pay. This benchmark paid it until the thirty-ninth round of
	// docs/benchmarks.md, and took 1.15–1.7 times as long a batch for it.
	if _, err := tx.Exec(`INSERT OR IGNORE INTO feed `+ceilingRows(perBatch, viewers), round); err != nil {
		return err
	}
	res, err := tx.Exec(fmt.Sprintf(`DELETE FROM feed WHERE v IN (
		WITH RECURSIVE seq(v) AS (SELECT 0 UNION ALL SELECT v + 1 FROM seq WHERE v < %d) SELECT v FROM seq)
		AND s < ?1 * %d`, viewers-1, perBatch), round-kept+1)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(perBatch) {
		return fmt.Errorf("trim of round %d deleted %d rows, want %d (%v)", round-kept, n, perBatch, err)
	}
	return tx.Commit()
}
