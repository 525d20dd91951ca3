package feeds

import (
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkParallelFiles asks whether SQLite writes can use the second
// core at all with modernc: one or two writer connections, each on a file
// of its own with the store's pragmas, each committing transactions of
// 50,000 feed-shaped rows (viewer, sort key, record) inserted in key order
// into a table of 1M rows. If two writers reach about twice the rows/s of
// one, moving feed rows to a second file with a writer of its own (the
// redesign docs/benchmarks.md proposes for the 20,000 events/s bar) can
// pay; if they reach no more than one, it cannot.
//
//	go test ./feeds -run '^$' -bench ParallelFiles -benchtime 20x
func BenchmarkParallelFiles(b *testing.B) {
	const (
		viewers = 10_000
		seed    = 1_000_000
		perTx   = 50_000
	)
	for _, writers := range []int{1, 2} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			dbs := make([]*sql.DB, writers)
			for i := range dbs {
				db, err := sql.Open("sqlite", dsn(fmt.Sprintf("%s/w%d.db", b.TempDir(), i), false)+"&_pragma=cache_size(-65536)")
				if err != nil {
					b.Fatal(err)
				}
				db.SetMaxOpenConns(1)
				b.Cleanup(func() { db.Close() })
				for _, q := range []string{
					`CREATE TABLE rows (v INTEGER, s INTEGER, r INTEGER, PRIMARY KEY (v, s, r)) WITHOUT ROWID`,
					fmt.Sprintf(`WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < %d)
						INSERT INTO rows SELECT i %% %d, i, i FROM seq`, seed, viewers),
				} {
					if _, err := db.Exec(q); err != nil {
						b.Fatal(err)
					}
				}
				dbs[i] = db
			}
			insert := fmt.Sprintf(`WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < %d)
				INSERT INTO rows SELECT abs(random()) %% %d, ?1 + i, ?1 + i FROM seq ORDER BY 1, 2, 3`, perTx, viewers)
			var rows int64
			var took time.Duration
			round := 0
			for b.Loop() {
				round++
				start := time.Now()
				var wg sync.WaitGroup
				errs := make([]error, writers)
				for w, db := range dbs {
					wg.Go(func() {
						_, errs[w] = db.Exec(insert, seed+round*perTx)
					})
				}
				wg.Wait()
				took += time.Since(start)
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				rows += int64(writers * perTx)
			}
			b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
		})
	}
}
