package feeds

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkSweepSlice measures one slice of 500 viewers, each 10% over a
// cap of 200 (220 rows, 20 to trim), with the feed table holding about
// 100k rows (just those viewers), 1M and 10M rows (the others at cap). The
// slice's own work (500 cutoff reads, 10k row deletes, all in primary-key
// ranges) does not depend on the table size. (It did while feed rows were
// also indexed by record: those deletes dirtied up to one index page per
// row; schema 0004 dropped that index.) "checkpoint=commit" is the daemon
// as it runs (the commit that crosses wal_autocheckpoint copies the WAL
// back); "checkpoint=apart" checkpoints between slices, off the clock.
//
//	go test ./feeds -run '^$' -bench SweepSlice -benchtime 20x -timeout 30m
func BenchmarkSweepSlice(b *testing.B) {
	const (
		sliceViewers = 500
		cap          = 200
		over         = cap / 10
	)
	for _, total := range []int{100_000, 1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("rows=%s", countLabel(total)), func(b *testing.B) {
			feeds := followingPosts(cap)
			s := openSweep(b, b.TempDir()+"/appview.db", feeds, SweepOptions{Actors: sliceViewers, VacuumPages: -1})
			lane := s.lanes[0].id
			// The slice's viewers sit in the middle of the id range, the
			// others (at cap) on both sides.
			others := max(0, (total-sliceViewers*(cap+over))/cap)
			first := int64(others/2 + 1)
			last := first + sliceViewers - 1
			start := time.Now()
			seedFeedRows(b, s, lane, 1, int64(others+sliceViewers), cap)
			seedFeedRows(b, s, lane, first, last, cap+over)
			rows := querySQL[int64](b, s, `SELECT count(*) FROM feed_items`)
			// Keep the rows a slice trims, to put them back between runs.
			mustExec(b, s, `CREATE TABLE bench_trimmed AS SELECT viewer_id, target_id, sort_us, record_id FROM (
				SELECT *, row_number() OVER (PARTITION BY viewer_id ORDER BY sort_us, record_id) AS rn
				FROM feed_items WHERE viewer_id BETWEEN ?1 AND ?2) WHERE rn <= ?3`, first, last, over)
			mustExec(b, s, `UPDATE sweep_state SET last_pass_end_us = ?`, t0.UnixMicro())
			if err := s.sweepInit(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.Logf("seeded %d feed rows in %v", rows, time.Since(start).Round(time.Millisecond))

			for _, apart := range []bool{false, true} {
				name := "checkpoint=commit"
				if apart {
					name = "checkpoint=apart"
				}
				b.Run(name, func(b *testing.B) {
					mustExec(b, s, fmt.Sprintf(`PRAGMA wal_autocheckpoint = %d`, map[bool]int{false: 1000, true: 0}[apart]))
					var deleted int64
					var took time.Duration
					for b.Loop() {
						b.StopTimer()
						mustExec(b, s, `INSERT OR IGNORE INTO feed_items SELECT * FROM bench_trimmed`)
						if err := s.Checkpoint(context.Background()); err != nil {
							b.Fatal(err)
						}
						s.sweep.state.cursorViewer = first - 1
						b.StartTimer()
						t := time.Now()
						res, err := s.SweepTick(context.Background(), Tick{Now: t, Mutated: true})
						took += time.Since(t)
						if err != nil {
							b.Fatal(err)
						}
						if res.Viewers != sliceViewers || res.RowsDeleted != sliceViewers*over {
							b.Fatalf("slice visited %d viewers and deleted %d rows, want %d and %d",
								res.Viewers, res.RowsDeleted, sliceViewers, sliceViewers*over)
						}
						deleted += res.RowsDeleted
					}
					b.ReportMetric(float64(deleted)/took.Seconds(), "rows/s")
					b.ReportMetric(float64(rows), "table_rows")
				})
			}
			mustExec(b, s, `PRAGMA wal_autocheckpoint = 1000`)
		})
	}
}

// seedFeedRows gives viewers from..to n feed rows each in one INSERT …
// SELECT. Record ids are spread over a pool of a million, as a feed holds
// posts from many authors; sort_us follows the record id.
func seedFeedRows(tb testing.TB, s *Store, lane, from, to int64, n int) {
	tb.Helper()
	mustExec(tb, s, `
		WITH RECURSIVE v(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM v WHERE i < ?2),
		j(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM j WHERE k < ?3 - 1)
		INSERT OR IGNORE INTO feed_items (viewer_id, target_id, sort_us, record_id)
		SELECT i, ?4, r, r FROM (SELECT i, (i * 7919 + k * 104729) % 1000000 + 1 AS r FROM v, j)`,
		from, to, n, lane)
}

func mustExec(tb testing.TB, s *Store, q string, args ...any) {
	tb.Helper()
	if _, err := s.writer.Exec(q, args...); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
}

func countLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return fmt.Sprint(n)
}
