package feeds

import (
	"database/sql"
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// BenchmarkFeedRowsPacked asks what the feed rows would cost if a row held
// many items: one row a viewer a batch, its items packed in a blob, against
// BenchmarkFeedRowsCeiling's row an item (the same viewers, items a batch
// and 12 batches kept, so the two are comparable).
//
// Why: the thirty-eighth round of docs/benchmarks.md found the feed rows'
// cost to be b-tree work a row, inserted and trimmed alike, and trimming
// by truncation no help on an uneven stream. Fewer, fatter rows cut the
// b-tree work instead: each batch inserts one row a viewer and trims the
// row twelve batches back, whatever the viewer's share of the items.
//
// The items are made and packed here in Go (16 bytes each: sort key,
// record id) and written with one prepared INSERT a viewer, so the figure
// is the storage's. BenchmarkFeedRowsCeiling makes its rows in SQL, which
// is a large part of its time (docs/benchmarks.md, thirty-eighth round);
// compare the two with that taken out of the ceiling's. A daemon would
// pack the items in its fan-out statement (a Go aggregate function
// registered with SQLite), whose cost this does not measure. Reads,
// deletes of single items and the cap counted in items are not modelled
// either.
//
//	go test ./feeds -run '^$' -bench FeedRowsPacked -benchtime 24x
func BenchmarkFeedRowsPacked(b *testing.B) {
	for _, events := range []int{10_000, 30_000} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			items := events * ceilingRowsPerEvent
			db := ceilingWriter(b, b.TempDir()+"/p.db")
			if _, err := db.Exec(`CREATE TABLE feed (v INTEGER, round INTEGER, items BLOB NOT NULL, PRIMARY KEY (v, round)) WITHOUT ROWID`); err != nil {
				b.Fatal(err)
			}
			// written[r] is how many rows round r wrote: its trim must
			// delete exactly those.
			var written []int64
			for round := range ceilingKeptBatches {
				n, err := packedBatch(db, round, items, ceilingViewers, -1, 0)
				if err != nil {
					b.Fatal(err)
				}
				written = append(written, n)
			}
			var took time.Duration
			round := ceilingKeptBatches
			for b.Loop() {
				start := time.Now()
				trimmed := round - ceilingKeptBatches
				n, err := packedBatch(db, round, items, ceilingViewers, trimmed, written[trimmed])
				if err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				written = append(written, n)
				round++
			}
			b.ReportMetric(float64(b.N*items)/took.Seconds(), "items/s")
			b.ReportMetric(float64(b.N*events)/took.Seconds(), "events/s")
		})
	}
}

// packedBatch writes round's items, the same as ceilingRows selects, one
// row a viewer, and deletes every viewer's row of round trimmed (none if
// it is negative), which must be want rows, in one transaction. It returns
// the rows it wrote.
func packedBatch(db *sql.DB, round, items, viewers, trimmed int, want int64) (int64, error) {
	packed := make([][]byte, viewers)
	for i := range items {
		key := round*items + i
		v := (key * 2654435761) % 4294967296 % viewers
		packed[v] = binary.BigEndian.AppendUint64(packed[v], uint64(key))
		packed[v] = binary.BigEndian.AppendUint64(packed[v], uint64(key))
	}
	tx, err := db.Begin()
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	insert, err := tx.Prepare(`INSERT INTO feed (v, round, items) VALUES (?1, ?2, ?3)`)
	if err != nil {
		return 0, err
	}
	var wrote int64
	for v, p := range packed {
		if p == nil {
			continue
		}
		if _, err := insert.Exec(v, round, p); err != nil {
			return 0, err
		}
		wrote++
	}
	if trimmed >= 0 {
		res, err := tx.Exec(fmt.Sprintf(`DELETE FROM feed WHERE v IN (
			WITH RECURSIVE seq(v) AS (SELECT 0 UNION ALL SELECT v + 1 FROM seq WHERE v < %d) SELECT v FROM seq)
			AND round = ?1`, viewers-1), trimmed)
		if err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil || n != want {
			return 0, fmt.Errorf("trim of round %d deleted %d rows, want %d (%v)", trimmed, n, want, err)
		}
	}
	return wrote, tx.Commit()
}
