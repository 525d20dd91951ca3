package feeds

import (
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// BenchmarkFeedPagePacked measures a page read over packed feed chunks
// (BenchmarkFeedRowsPackedLanes's design: a viewer's items are a bag of
// chunks, each sorted, read whole), against the same page off a row an item,
// the second unknown the thirty-eighth round of docs/benchmarks.md left
// for packed rows.
//
// Every layout holds the same items: 10,000 viewers, each with a compacted
// chunk of 192 items (the cap) and 0–12 batch chunks of 0–32 items after
// it, as a viewer between compactions has. One batch item in twenty is
// backdated to a random earlier sort key, as a post whose created_at is
// older than its arrival, or a follow's merge, is, so chunks overlap in
// sort key. A read is a viewer's first page and the page after it, 50
// items each, by a cursor (sort key, record id): off the rows, two range
// reads of the primary key; off the chunks, every chunk of the viewer
// read, then either decoded whole and sorted (key-sort) or, as each
// chunk is sorted, merged newest first from the cursor on, decoding only
// the items the page takes (key-merge; rowid-merge and heap-merge with
// the chunks kept the other ways chunkLayout has).
//
// Before the timing, every layout's two pages are compared for every
// tenth viewer and must be the same items in the same order.
//
//	go test ./feeds -run '^$' -bench FeedPagePacked -benchtime 20000x -count 2
func BenchmarkFeedPagePacked(b *testing.B) {
	const (
		viewers = ceilingViewers
		limit   = 50
	)
	// The same items in three files, the chunks kept one way in each.
	dbs := map[string]*sql.DB{}
	for _, layout := range []chunkLayout{keyedChunks, rowidChunks, heapChunks} {
		db := packWriter(b, b.TempDir()+"/"+layout.name+".db")
		if err := fillPageLayouts(db, viewers, layout); err != nil {
			b.Fatal(err)
		}
		dbs[layout.name] = db
	}
	layouts := []string{"rows", "key-sort", "key-merge", "rowid-merge", "heap-merge"}
	readers := map[string]pageReader{}
	for _, name := range layouts {
		var (
			r   pageReader
			err error
		)
		switch name {
		case "rows":
			r, err = newRowPages(dbs["key"], limit)
		case "key-sort":
			r, err = newChunkPages(dbs["key"], keyedChunks, limit)
		case "key-merge":
			r, err = newMergedPages(dbs["key"], keyedChunks, limit)
		case "rowid-merge":
			r, err = newMergedPages(dbs["rowid"], rowidChunks, limit)
		case "heap-merge":
			r, err = newMergedPages(dbs["heap"], heapChunks, limit)
		}
		if err != nil {
			b.Fatal(err)
		}
		readers[name] = r
	}
	for v := 0; v < viewers; v += 10 {
		want, err := twoPages(readers["rows"], v)
		if err != nil {
			b.Fatal(err)
		}
		if len(want) != 2*limit {
			b.Fatalf("viewer %d: %d items off the rows, want %d", v, len(want), 2*limit)
		}
		for _, name := range layouts[1:] {
			got, err := twoPages(readers[name], v)
			if err != nil {
				b.Fatal(err)
			}
			if !slices.Equal(got, want) {
				b.Fatalf("viewer %d: %s's pages (%d items) are not the rows' (%d)", v, name, len(got), len(want))
			}
		}
	}
	for _, name := range layouts {
		b.Run("layout="+name, func(b *testing.B) {
			read := readers[name]
			pages, v := 0, 0
			for b.Loop() {
				v = (v + 7919) % viewers
				if _, err := twoPages(read, v); err != nil {
					b.Fatal(err)
				}
				pages += 2
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pages), "ns/page")
		})
	}
}

// fillPageLayouts writes the same items (the same every call) both ways:
// feed_rows a row an item, layout's feed a chunk each.
func fillPageLayouts(db *sql.DB, viewers int, layout chunkLayout) error {
	for _, ddl := range []string{
		`CREATE TABLE feed_rows (v INTEGER, s INTEGER, r INTEGER, PRIMARY KEY (v, s, r)) WITHOUT ROWID`,
		layout.create,
	} {
		if _, err := db.Exec(ddl); err != nil {
			return err
		}
	}
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	row, err := tx.Prepare(`INSERT INTO feed_rows (v, s, r) VALUES (?1, ?2, ?3)`)
	if err != nil {
		return err
	}
	chunk, err := tx.Prepare(layout.insert)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var record int64
	for v := range viewers {
		var s int64
		next := func(backdate bool) packedItem {
			s += 1 + rng.Int64N(1000)
			record++
			if backdate {
				return packedItem{rng.Int64N(s), record}
			}
			return packedItem{s, record}
		}
		chunks := [][]packedItem{make([]packedItem, 192)}
		for i := range chunks[0] {
			chunks[0][i] = next(false)
		}
		for range rng.IntN(13) {
			c := make([]packedItem, rng.IntN(33))
			for i := range c {
				c[i] = next(rng.IntN(20) == 0)
			}
			chunks = append(chunks, c)
		}
		for seq, c := range chunks {
			if len(c) == 0 {
				continue
			}
			for _, it := range c {
				if _, err := row.Exec(v, it.s, it.r); err != nil {
					return err
				}
			}
			slices.SortFunc(c, oldestFirst) // as pack_items packs
			if _, err := chunk.Exec(v, seq, packChunk(c)); err != nil {
				return err
			}
		}
	}
	return tx.Commit()
}

// pageReader reads one page of a viewer's feed: up to limit items older
// than the cursor after, newest first, appended to out.
type pageReader interface {
	page(v int, after packedItem, out []packedItem) ([]packedItem, error)
}

// twoPages reads viewer v's first page and the page after it.
func twoPages(r pageReader, v int) ([]packedItem, error) {
	var out []packedItem
	after := packedItem{math.MaxInt64, math.MaxInt64}
	for range 2 {
		n := len(out)
		var err error
		if out, err = r.page(v, after, out); err != nil {
			return nil, err
		}
		if len(out) > n {
			after = out[len(out)-1]
		}
	}
	return out, nil
}

func newRowPages(db *sql.DB, limit int) (pageReader, error) {
	q, err := db.Prepare(fmt.Sprintf(`SELECT s, r FROM feed_rows WHERE v = ?1 AND (s, r) < (?2, ?3) ORDER BY s DESC, r DESC LIMIT %d`, limit))
	return &rowPages{q: q, limit: limit}, err
}

func newChunkPages(db *sql.DB, layout chunkLayout, limit int) (pageReader, error) {
	q, err := db.Prepare(layout.read)
	return &chunkPages{q: q, limit: limit}, err
}

func newMergedPages(db *sql.DB, layout chunkLayout, limit int) (pageReader, error) {
	q, err := db.Prepare(layout.read)
	return &mergedPages{q: q, limit: limit}, err
}

// rowPages reads pages off feed_rows, a range read a page.
type rowPages struct {
	q     *sql.Stmt
	limit int
}

func (p *rowPages) page(v int, after packedItem, out []packedItem) ([]packedItem, error) {
	rs, err := p.q.Query(v, after.s, after.r)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	for rs.Next() {
		var it packedItem
		if err := rs.Scan(&it.s, &it.r); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rs.Err()
}

// chunkPages reads pages off feed's chunks: all of the viewer's, a page.
type chunkPages struct {
	q     *sql.Stmt
	limit int
	buf   []packedItem
}

func (p *chunkPages) page(v int, after packedItem, out []packedItem) ([]packedItem, error) {
	rs, err := p.q.Query(v)
	if err != nil {
		return nil, err
	}
	items, err := chunkItems(rs, p.buf[:0])
	if err != nil {
		return nil, err
	}
	p.buf = items
	// The first item past the cursor, newest first.
	i, _ := slices.BinarySearchFunc(items, after, newestFirst)
	if i < len(items) && items[i] == after {
		i++
	}
	return append(out, items[i:min(len(items), i+p.limit)]...), nil
}

// mergedPages reads pages off feed's chunks by merging them: each chunk is
// sorted oldest first, so a page starts in each at the cursor (a binary
// search) and takes the newest of the chunks' next items, limit times.
type mergedPages struct {
	q     *sql.Stmt
	limit int
	buf   []byte
	ends  []int // each chunk's end in buf; its start is the previous end
	heads []int // each chunk's next item, counted from its start, plus one
}

func (p *mergedPages) page(v int, after packedItem, out []packedItem) ([]packedItem, error) {
	if err := p.load(v); err != nil {
		return nil, err
	}
	return p.merge(after, out), nil
}

// load reads viewer v's chunks into buf.
func (p *mergedPages) load(v int) error {
	rs, err := p.q.Query(v)
	if err != nil {
		return err
	}
	defer rs.Close()
	p.buf, p.ends = p.buf[:0], p.ends[:0]
	for rs.Next() {
		var blob sql.RawBytes
		if err := rs.Scan(&blob); err != nil {
			return err
		}
		if len(blob)%16 != 0 {
			return fmt.Errorf("viewer %d: a chunk of %d bytes", v, len(blob))
		}
		p.buf = append(p.buf, blob...)
		p.ends = append(p.ends, len(p.buf))
	}
	return rs.Err()
}

// item is the i-th item of the chunk starting at byte start.
func (p *mergedPages) item(start, i int) packedItem {
	b := p.buf[start+16*i:]
	return packedItem{int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:]))}
}

// merge appends to out the limit newest loaded items older than after, no
// item twice.
func (p *mergedPages) merge(after packedItem, out []packedItem) []packedItem {
	p.heads = p.heads[:0]
	start := 0
	for _, end := range p.ends {
		n := (end - start) / 16
		// Items before index h are older than the cursor.
		p.heads = append(p.heads, sort.Search(n, func(i int) bool { return oldestFirst(p.item(start, i), after) >= 0 }))
		start = end
	}
	last := after
	for taken := 0; taken < p.limit; {
		best, bestItem := -1, packedItem{}
		start = 0
		for c, end := range p.ends {
			if h := p.heads[c]; h > 0 {
				if it := p.item(start, h-1); best < 0 || oldestFirst(it, bestItem) > 0 {
					best, bestItem = c, it
				}
			}
			start = end
		}
		if best < 0 {
			break
		}
		p.heads[best]--
		if bestItem != last {
			out = append(out, bestItem)
			last = bestItem
			taken++
		}
	}
	return out
}
