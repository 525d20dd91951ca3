package feeds

import (
	"cmp"
	"database/sql"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkFeedRowsPackedLanes measures one design for packed feed rows
// whole, on BenchmarkFeedRowsCeiling's workload and with its rows made the
// same way in SQL, so the two figures compare directly:
//
//   - the fan-out stays one INSERT … SELECT: a batch's items are grouped
//     by viewer and packed by the Go aggregate pack_items into one chunk
//     a viewer, keyed (viewer, batch);
//   - chunks are not ordered against each other, only within. A viewer's
//     items are a bag of chunks, read whole (a page reads them all and
//     merges them; BenchmarkFeedPagePacked), so a backdated item can go
//     in any chunk;
//   - the cap counts items. The aggregate tells each chunk's size
//     (packTally), kept a viewer in memory here (a daemon would keep it
//     in a table or count it at start). A viewer over cap+slack items is
//     compacted in the same transaction: its chunks read, sorted newest
//     first, cut to the cap and written back as one chunk. So a viewer
//     holds cap to cap+slack items, and the trim's cost is a few rows a
//     viewer every slack items, not a row an item.
//
// The cap is the ceiling's (its 12 batches kept, 192 items a viewer at
// 10,000 events a batch, about the daemon's default of 200). The setup
// runs untimed until compactions have begun. After the timing, every
// hundredth viewer's newest cap items are checked against the stream's,
// recomputed from its keys: a compaction that dropped or kept the wrong
// items fails it. viewers=skewed gives viewers items unevenly
// (skewedRows), as the bench stream does.
//
// layout= is how the table keeps chunks (chunkLayout: key, rowid, heap).
// Read its figures with the thirty-ninth round of docs/benchmarks.md: in
// the daemon, as throwaways, none of the three layouts made the ingest
// faster, though the heap gains 1.3–1.4 times here. This benchmark makes
// its rows with a CTE, reading no index, in a file of its own; the
// daemon's fan-out reads follows and records for them, and shares its
// cache with every table.
//
//	go test ./feeds -run '^$' -bench 'FeedRowsPackedLanes|FeedRowsCeiling/writers=1' -benchtime 24x
func BenchmarkFeedRowsPackedLanes(b *testing.B) {
	for _, shape := range []struct {
		layout       chunkLayout
		viewers      string
		events       int
		slackPerCapX int // slack as a share of the cap, in quarters
	}{
		{keyedChunks, "uniform", 10_000, 4}, {keyedChunks, "uniform", 30_000, 4}, {keyedChunks, "skewed", 10_000, 4},
		{rowidChunks, "uniform", 10_000, 4},
		{heapChunks, "uniform", 10_000, 4}, {heapChunks, "uniform", 10_000, 2}, {heapChunks, "uniform", 30_000, 4}, {heapChunks, "skewed", 10_000, 4},
	} {
		b.Run(fmt.Sprintf("layout=%s/viewers=%s/events=%d/slack=%.2fcap", shape.layout.name, shape.viewers, shape.events, float64(shape.slackPerCapX)/4), func(b *testing.B) {
			items := shape.events * ceilingRowsPerEvent
			l := &lanes{
				layout:   shape.layout,
				viewers:  ceilingViewers,
				perBatch: items,
				cap:      ceilingKeptBatches * items / ceilingViewers,
				rows:     ceilingRows,
				viewerOf: uniformViewer,
			}
			if shape.viewers == "skewed" {
				l.rows, l.viewerOf = skewedRows, skewedViewer
			}
			l.slack = l.cap * shape.slackPerCapX / 4
			l.open(b, b.TempDir()+"/l.db")
			// Fill until compactions have begun, and a little past.
			round := 0
			for ; round < ceilingKeptBatches*(4+shape.slackPerCapX)/4+2; round++ {
				if err := l.batch(round); err != nil {
					b.Fatal(err)
				}
			}
			l.compactions = 0
			var took time.Duration
			start := round
			for b.Loop() {
				t0 := time.Now()
				if err := l.batch(round); err != nil {
					b.Fatal(err)
				}
				took += time.Since(t0)
				round++
			}
			b.StopTimer()
			if err := l.check(round); err != nil {
				b.Fatal(err)
			}
			batches := round - start
			b.ReportMetric(float64(batches*shape.events)/took.Seconds(), "events/s")
			b.ReportMetric(float64(batches*items)/took.Seconds(), "items/s")
			b.ReportMetric(float64(l.compactions)/float64(batches), "compactions/batch")
			held := 0
			for _, n := range l.counts {
				held += n
			}
			b.ReportMetric(float64(held)/float64(l.viewers), "items/viewer")
		})
	}
}

// lanes is one file of packed feed chunks and the item count of each
// viewer's.
type lanes struct {
	layout                        chunkLayout
	db                            *sql.DB
	rows                          func(n, viewers int) string
	viewerOf                      func(key int) int
	viewers, perBatch, cap, slack int
	counts                        []int
	compactions                   int64
}

func (l *lanes) open(b *testing.B, path string) {
	l.db = packWriter(b, path)
	l.counts = make([]int, l.viewers)
	if _, err := l.db.Exec(l.layout.create); err != nil {
		b.Fatal(err)
	}
}

// batch writes round's items, a chunk a viewer numbered round+1, and
// compacts the viewers it takes over cap+slack into one chunk each,
// numbered round+1 too (chunkLayout's insert), in one transaction.
func (l *lanes) batch(round int) error {
	tx, err := l.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var over []int
	tally := func(v int64, items int) {
		l.counts[v] += items
		if l.counts[v] > l.cap+l.slack {
			over = append(over, int(v))
		}
	}
	packTally.Store(&tally)
	defer packTally.Store(nil)
	if _, err := tx.Exec(`WITH c(v, s, r) AS (`+l.rows(l.perBatch, l.viewers)+`) `+l.layout.insertBatch, round); err != nil {
		return err
	}
	for _, v := range over {
		if err := l.compact(tx, v, round+1); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// packedItem is a feed item as a chunk holds it.
type packedItem struct{ s, r int64 }

// newestFirst orders items as a page does: sort key, then record id, both
// descending.
func newestFirst(a, b packedItem) int { return oldestFirst(b, a) }

// oldestFirst orders items as a chunk holds them.
func oldestFirst(a, b packedItem) int {
	if c := cmp.Compare(a.s, b.s); c != 0 {
		return c
	}
	return cmp.Compare(a.r, b.r)
}

// chunkItems reads the chunks rs selects (one blob column) into items,
// newest first, with no item twice, and closes rs.
func chunkItems(rs *sql.Rows, items []packedItem) ([]packedItem, error) {
	defer rs.Close()
	for rs.Next() {
		var blob []byte
		if err := rs.Scan(&blob); err != nil {
			return nil, err
		}
		if len(blob)%16 != 0 {
			return nil, fmt.Errorf("a chunk of %d bytes", len(blob))
		}
		for i := 0; i < len(blob); i += 16 {
			items = append(items, packedItem{int64(binary.BigEndian.Uint64(blob[i:])), int64(binary.BigEndian.Uint64(blob[i+8:]))})
		}
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(items, newestFirst)
	return slices.Compact(items), nil
}

// chunkLayout is a table of chunks and its statements: each takes the
// viewer as ?1.
type chunkLayout struct {
	name   string
	create string
	// insertBatch packs batch ?1's items, from a CTE c(v, s, r), into a
	// chunk a viewer numbered ?1+1.
	insertBatch string
	// read selects the viewer's chunks, drop deletes them, and insert
	// writes chunk number ?2 with items ?3, after drop if ?2 is a batch's
	// number (a compaction).
	read, drop, insert string
}

// keyedChunks keys chunks (viewer, number) in a WITHOUT ROWID table, as
// feed_items is keyed. A chunk is then its b-tree's key, so a descent past
// a compacted chunk (192 items, 3 KiB) reads its overflow pages too:
// SQLite compares whole keys, and an index b-tree keeps at most about a
// quarter of a page of a cell on the page.
var keyedChunks = chunkLayout{
	name:        "key",
	create:      `CREATE TABLE feed (v INTEGER, seq INTEGER, items BLOB NOT NULL, PRIMARY KEY (v, seq)) WITHOUT ROWID`,
	insertBatch: `INSERT OR IGNORE INTO feed (v, seq, items) SELECT v, ?1 + 1, ` + packItemsFunc + `(v, s, r) FROM c GROUP BY v`,
	read:        `SELECT items FROM feed WHERE v = ?1`,
	drop:        `DELETE FROM feed WHERE v = ?1`,
	insert:      `INSERT INTO feed (v, seq, items) VALUES (?1, ?2, ?3)`,
}

// rowidChunks keys chunks by rowid, the viewer in its high 32 bits and the
// chunk's number in the low: the b-tree compares integers, and a chunk's
// overflow pages are read only when its items are. But a table b-tree
// keeps up to a page of a cell on the page, so a leaf holds a few chunks,
// and every batch inserts a chunk beside every viewer's: the leaves split
// and are rebalanced, moving kilobytes each time.
var rowidChunks = chunkLayout{
	name:        "rowid",
	create:      `CREATE TABLE feed (id INTEGER PRIMARY KEY, items BLOB NOT NULL)`,
	insertBatch: `INSERT OR IGNORE INTO feed (id, items) SELECT (v << 32) | (?1 + 1), ` + packItemsFunc + `(v, s, r) FROM c GROUP BY v`,
	read:        `SELECT items FROM feed WHERE id BETWEEN ?1 << 32 AND (?1 << 32) | 4294967295`,
	drop:        `DELETE FROM feed WHERE id BETWEEN ?1 << 32 AND (?1 << 32) | 4294967295`,
	insert:      `INSERT INTO feed (id, items) VALUES ((?1 << 32) | ?2, ?3)`,
}

// heapChunks appends chunks to a rowid table in the order they are
// written (the rowid is the chunk's number, then the viewer) and finds a
// viewer's through an index on the viewer: two b-tree inserts a chunk,
// but the table's is an append at its end, and the index's cells are two
// integers.
var heapChunks = chunkLayout{
	name: "heap",
	create: `CREATE TABLE feed (id INTEGER PRIMARY KEY, v INTEGER NOT NULL, items BLOB NOT NULL);
		CREATE INDEX feed_by_viewer ON feed (v)`,
	insertBatch: `INSERT OR IGNORE INTO feed (id, v, items) SELECT ((?1 + 1) << 21) | (v << 1), v, ` + packItemsFunc + `(v, s, r) FROM c GROUP BY v`,
	read:        `SELECT items FROM feed WHERE v = ?1`,
	drop:        `DELETE FROM feed WHERE v = ?1`,
	insert:      `INSERT INTO feed (id, v, items) VALUES ((?2 << 21) | (?1 << 1) | 1, ?1, ?3)`,
}

// compact rewrites viewer v's chunks as one holding its newest cap items,
// oldest first as every chunk, numbered seq.
func (l *lanes) compact(tx *sql.Tx, v, seq int) error {
	rs, err := tx.Query(l.layout.read, v)
	if err != nil {
		return err
	}
	items, err := chunkItems(rs, nil)
	if err != nil {
		return err
	}
	items = items[:min(len(items), l.cap)]
	slices.Reverse(items)
	blob := packChunk(items)
	if _, err := tx.Exec(l.layout.drop, v); err != nil {
		return err
	}
	if _, err := tx.Exec(l.layout.insert, v, seq, blob); err != nil {
		return err
	}
	l.counts[v] = len(items)
	l.compactions++
	return nil
}

// check compares every hundredth viewer's newest cap items with the
// stream's, recomputed from the keys of rounds before end: each key k of
// round r is item (k, k) of viewer viewerOf(k).
func (l *lanes) check(end int) error {
	want := map[int][]packedItem{}
	for v := 0; v < l.viewers; v += 100 {
		want[v] = nil
	}
	full := 0
	for k := end*l.perBatch - 1; k >= 0 && full < len(want); k-- {
		v := l.viewerOf(k)
		got, sampled := want[v]
		if !sampled || len(got) == l.cap {
			continue
		}
		want[v] = append(got, packedItem{int64(k), int64(k)})
		if len(want[v]) == l.cap {
			full++
		}
	}
	for v, w := range want {
		rs, err := l.db.Query(l.layout.read, v)
		if err != nil {
			return err
		}
		held, err := chunkItems(rs, nil)
		if err != nil {
			return err
		}
		if len(held) < len(w) || !slices.Equal(held[:len(w)], w) {
			return fmt.Errorf("viewer %d holds %d items, newest %v; want %d, newest %v", v, len(held), held[:min(3, len(held))], len(w), w[:min(3, len(w))])
		}
	}
	return nil
}

// uniformViewer is ceilingRows's viewer of key k.
func uniformViewer(k int) int { return k * 2654435761 % 4294967296 % ceilingViewers }

// skewedViewer is skewedRows's viewer of key k, computed as SQLite does.
func skewedViewer(k int) int {
	x := float64(k*2654435761%4294967296) / 4294967296.0
	return int(x * x * ceilingViewers)
}
