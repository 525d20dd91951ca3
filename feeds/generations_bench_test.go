package feeds

import (
	"database/sql"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// BenchmarkFeedRowsGenerations asks what the feed rows could cost if
// feeds were trimmed by emptying whole tables instead of deleting rows,
// against BenchmarkFeedRowsCeiling's ideal row-by-row trim (the same
// viewers, rows a batch and cap, so the two are comparable).
//
// Why: a row's delete costs SQLite about what its insert does (a b-tree
// cell removed and its page rebalanced), and every feed row but the last
// cap a viewer is deleted sooner or later, so trims are about half of
// what feed rows cost, and they are why a cold ingest slows once feeds
// reach their caps. A DELETE with no WHERE is different: SQLite truncates
// the table, handing its pages to the free list without touching a row.
//
// The scheme measured is generational, as a copying garbage collector
// is. New rows go to the current one of a few young tables; each takes
// `generation` batches before the next takes over. When a table's turn
// comes round again, its rows are the oldest young rows. For a viewer
// given at least the mean they are beyond its cap, as the newer tables
// hold enough. For the others the rows still within the cap (survivors)
// are copied to an old table first, which is trimmed row by row; then the
// young table is emptied. Dense viewers' rows die for nothing; only
// sparse viewers' survivors are copied and deleted. The rotation's pass
// over the viewers (a bounded count of each one's newer rows, and the
// old table kept to what the young ones leave of the cap) is in the
// timing, as are the copies; the check that a rotation leaves every
// tenth viewer at least what it held up to the cap is not.
//
// The shapes: with young tables of `generation` batches each, the ones
// newer than the dying table hold (young-1)*generation batches. young=3
// generation=6, young=4 generation=4 and young=5 generation=3 hold the
// cap's 12 batches there, so feeds keep 12 batches plus the current
// table's, and the viewers the hash gave fewer rows than the cap over
// those 12 have survivors. young=3 generation=12 holds 24 and leaves
// none, trading disk for copies. viewers=skewed gives viewers rows
// unevenly (skewedRows): the slower ones hold less than their cap in the
// newer tables, and their rows are copied. Read the uniform figures with
// the skewed ones beside them: the thirty-eighth round of
// docs/benchmarks.md found the daemon no faster in generations on the
// bench stream, whose viewers are more uneven still.
//
//	go test ./feeds -run '^$' -bench FeedRowsGenerations -benchtime 24x
func BenchmarkFeedRowsGenerations(b *testing.B) {
	const (
		viewers      = ceilingViewers
		rowsPerEvent = ceilingRowsPerEvent
		keptBatches  = ceilingKeptBatches
		events       = 30_000
	)
	for _, shape := range []struct {
		viewers           string
		young, generation int
	}{
		{"uniform", 3, keptBatches / 2}, {"uniform", 3, keptBatches}, {"uniform", 4, keptBatches / 3}, {"uniform", 5, keptBatches / 4},
		{"skewed", 3, keptBatches / 2}, {"skewed", 3, keptBatches},
	} {
		b.Run(fmt.Sprintf("viewers=%s/young=%d/generation=%d/events=%d", shape.viewers, shape.young, shape.generation, events), func(b *testing.B) {
			rows := ceilingRows
			if shape.viewers == "skewed" {
				rows = skewedRows
			}
			g := newGenerations(b, b.TempDir()+"/g.db", rows, viewers, events*rowsPerEvent, keptBatches, shape.young, shape.generation)
			var took time.Duration
			round := shape.young * shape.generation // the setup filled every young table
			for b.Loop() {
				start := time.Now()
				if err := g.batch(round); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				round++
			}
			took -= g.checking
			written := float64(b.N * events * rowsPerEvent)
			b.ReportMetric(written/took.Seconds(), "rows/s")
			b.ReportMetric(float64(b.N*events)/took.Seconds(), "events/s")
			b.ReportMetric(float64(g.survivors)/float64(b.N), "copied/batch")
			b.ReportMetric(float64(g.rotating.Milliseconds())/float64(b.N), "rotate-ms/batch")
		})
	}
}

// generations is one file of feed rows kept in young tables and an old
// one.
type generations struct {
	db                                 *sql.DB
	rows                               func(n, viewers int) string
	viewers, perBatch, young, gen, cap int
	survivors                          int64
	rotating, checking                 time.Duration
}

func newGenerations(b *testing.B, path string, rows func(n, viewers int) string, viewers, perBatch, kept, young, gen int) *generations {
	b.Helper()
	db := ceilingWriter(b, path)
	g := &generations{db: db, rows: rows, viewers: viewers, perBatch: perBatch, young: young, gen: gen, cap: kept * perBatch / viewers}
	tables := []string{"old"}
	for i := range young {
		tables = append(tables, g.table(i*gen))
	}
	for _, t := range tables {
		if _, err := db.Exec(`CREATE TABLE ` + t + ` (v INTEGER, s INTEGER, r INTEGER, PRIMARY KEY (v, s, r)) WITHOUT ROWID`); err != nil {
			b.Fatal(err)
		}
	}
	for round := range young * gen {
		if _, err := db.Exec(`INSERT INTO `+g.table(round)+` `+rows(perBatch, viewers), round); err != nil {
			b.Fatal(err)
		}
	}
	return g
}

// skewedRows is ceilingRows with viewers given rows unevenly, as followers
// of different accounts are: viewer floor(viewers·u²) for a uniform u, so
// the viewer at rank q (from the busiest) gets 1/(2√q) of the mean. A
// tenth get under 0.53 of it, half under 0.71, a quarter over 1, the
// busiest 1% over 5. (The appview-bench stream's viewers, counted over
// four generations of the throwaway build in docs/benchmarks.md's
// thirty-eighth round: a tenth under 0.35 of the mean, half under 0.80,
// a quarter over 1.22, the busiest 44 times it.)
func skewedRows(n, viewers int) string {
	return fmt.Sprintf(`WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < %d),
		u(i, x) AS (SELECT i, (((?1 * %d + i) * 2654435761) %% 4294967296) / 4294967296.0 FROM seq)
		SELECT CAST(x * x * %d AS INTEGER), ?1 * %d + i, ?1 * %d + i FROM u ORDER BY 1, 2, 3`,
		n-1, n, viewers, n, n)
}

// holdings counts every tenth viewer's rows over all the tables.
func (g *generations) holdings(tx *sql.Tx) ([]int, error) {
	var arms []string
	for i := range g.young {
		arms = append(arms, `SELECT 1 FROM `+g.table(i*g.gen)+` WHERE v = ?1`)
	}
	arms = append(arms, `SELECT 1 FROM old WHERE v = ?1`)
	q := `SELECT count(*) FROM (` + strings.Join(arms, " UNION ALL ") + `)`
	var held []int
	for v := 0; v < g.viewers; v += 10 {
		var n int
		if err := tx.QueryRow(q, v).Scan(&n); err != nil {
			return nil, err
		}
		held = append(held, n)
	}
	return held, nil
}

// table names the young table round's rows go to.
func (g *generations) table(round int) string {
	return fmt.Sprintf("young%d", round/g.gen%g.young)
}

// batch writes round's rows in one transaction, rotating first when round
// starts a generation.
func (g *generations) batch(round int) error {
	tx, err := g.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	table := g.table(round)
	if round%g.gen == 0 {
		// The table round takes over holds its oldest generation; the
		// others hold the generations since.
		var newer []string
		for i := 1; i < g.young; i++ {
			newer = append(newer, g.table(round+i*g.gen))
		}
		checked := time.Now()
		before, err := g.holdings(tx)
		if err != nil {
			return err
		}
		start := time.Now()
		g.checking += start.Sub(checked)
		if err := g.rotate(tx, table, newer); err != nil {
			return err
		}
		end := time.Now()
		g.rotating += end.Sub(start)
		after, err := g.holdings(tx)
		if err != nil {
			return err
		}
		for i := range before {
			if after[i] < min(before[i], g.cap) {
				return fmt.Errorf("round %d: viewer %d held %d rows and keeps %d, under the cap of %d", round, i*10, before[i], after[i], g.cap)
			}
		}
		g.checking += time.Since(end)
	}
	// OR IGNORE, here and in the copy, for the reason ceilingBatch gives.
	if _, err := tx.Exec(`INSERT OR IGNORE INTO `+table+` `+g.rows(g.perBatch, g.viewers), round); err != nil {
		return err
	}
	return tx.Commit()
}

// rotate copies the survivors of young table dying to the old table, holds
// each viewer's old rows to what the newer tables leave of the cap, and
// empties dying.
func (g *generations) rotate(tx *sql.Tx, dying string, newer []string) error {
	var err error
	prepare := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = tx.Prepare(q)
		return st
	}
	var counts []string
	for _, t := range newer {
		counts = append(counts, fmt.Sprintf(`(SELECT count(*) FROM (SELECT 1 FROM %s WHERE v = ?1 LIMIT ?2))`, t))
	}
	count := prepare(`SELECT ` + strings.Join(counts, " + "))
	dropOld := prepare(`DELETE FROM old WHERE v = ?1`)
	keep := prepare(fmt.Sprintf(`INSERT OR IGNORE INTO old SELECT v, s, r FROM %s WHERE v = ?1 ORDER BY s DESC, r DESC LIMIT ?2`, dying))
	cutoff := prepare(`SELECT s, r FROM old WHERE v = ?1 ORDER BY s DESC, r DESC LIMIT 1 OFFSET ?2`)
	trim := prepare(`DELETE FROM old WHERE v = ?1 AND (s, r) <= (?2, ?3)`)
	if err != nil {
		return err
	}
	for v := range g.viewers {
		var newer int
		if err := count.QueryRow(v, g.cap).Scan(&newer); err != nil {
			return err
		}
		if newer >= g.cap {
			if _, err := dropOld.Exec(v); err != nil {
				return err
			}
			continue
		}
		res, err := keep.Exec(v, g.cap-newer)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		g.survivors += n
		var s, r int64
		switch err := cutoff.QueryRow(v, g.cap-newer).Scan(&s, &r); err {
		case nil:
			if _, err := trim.Exec(v, s, r); err != nil {
				return err
			}
		case sql.ErrNoRows:
		default:
			return err
		}
	}
	_, err = tx.Exec(`DELETE FROM ` + dying)
	return err
}

// BenchmarkFeedRowsGenerationsPage prices the generational layout's read
// side: a page of 50 rows (one viewer's newest, or the page after a
// cursor) merged from the young tables and the old one, against the same
// page off the single trimmed table of BenchmarkFeedRowsCeiling. Ten
// thousand viewers at a cap of 192, 12 batches of 10,000 events kept.
//
//	go test ./feeds -run '^$' -bench FeedRowsGenerationsPage
func BenchmarkFeedRowsGenerationsPage(b *testing.B) {
	const (
		viewers  = ceilingViewers
		perBatch = 10_000 * ceilingRowsPerEvent
		kept     = ceilingKeptBatches
		limit    = 50
	)
	page := func(tables []string, after bool) string {
		var arms []string
		for _, t := range tables {
			arm := `SELECT s, r FROM ` + t + ` WHERE v = ?1`
			if after {
				arm += ` AND (s, r) < (?2, ?3)`
			}
			arms = append(arms, arm)
		}
		return strings.Join(arms, " UNION ALL ") + fmt.Sprintf(" ORDER BY s DESC, r DESC LIMIT %d", limit)
	}
	layouts := []struct {
		name   string
		db     func(b *testing.B) *sql.DB
		tables []string
	}{
		{"one-table", func(b *testing.B) *sql.DB {
			return ceilingDB(b, b.TempDir()+"/c.db", viewers, perBatch, kept)
		}, []string{"feed"}},
		{"young=4", func(b *testing.B) *sql.DB {
			g := newGenerations(b, b.TempDir()+"/g.db", ceilingRows, viewers, perBatch, kept, 4, kept/3)
			for round := 4 * kept / 3; round < 4*kept/3+kept/3+1; round++ {
				if err := g.batch(round); err != nil { // one rotation, so the old table has its survivors
					b.Fatal(err)
				}
			}
			return g.db
		}, []string{"young0", "young1", "young2", "young3", "old"}},
	}
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			db := l.db(b)
			first, err := db.Prepare(page(l.tables, false))
			if err != nil {
				b.Fatal(err)
			}
			next, err := db.Prepare(page(l.tables, true))
			if err != nil {
				b.Fatal(err)
			}
			var pages, rows int
			v := 0
			for b.Loop() {
				v = (v + 7919) % viewers
				var s, r int64
				n := 0
				prevS, prevR := int64(math.MaxInt64), int64(math.MaxInt64)
				for _, q := range []func() (*sql.Rows, error){
					func() (*sql.Rows, error) { return first.Query(v) },
					func() (*sql.Rows, error) { return next.Query(v, s, r) },
				} {
					got, err := q()
					if err != nil {
						b.Fatal(err)
					}
					for got.Next() {
						if err := got.Scan(&s, &r); err != nil {
							b.Fatal(err)
						}
						if s > prevS || s == prevS && r >= prevR {
							b.Fatalf("viewer %d: row (%d, %d) after (%d, %d): the merged pages are out of order", v, s, r, prevS, prevR)
						}
						prevS, prevR = s, r
						n++
					}
					if err := got.Err(); err != nil {
						b.Fatal(err)
					}
					got.Close()
					pages++
				}
				rows += n
			}
			// Both pages of a viewer come newest first with no row twice,
			// checked above, and nearly full.
			if rows < pages*limit*9/10 {
				b.Fatalf("%d rows over %d pages: the pages are not full", rows, pages)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pages), "ns/page")
		})
	}
}
