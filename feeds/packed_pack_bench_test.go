package feeds

import (
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"
)

// packItemsFunc is the name of the aggregate the packed-row benchmarks
// register: pack_items(viewer, sort_us, record_id) packs a group's sort
// keys and record ids into one blob, 8 bytes big-endian each, sorted
// oldest first (so a page can merge chunks without sorting them,
// BenchmarkFeedPagePacked), and tells packTally, if set, the group's
// viewer and item count. A daemon packing feed items in its fan-out's
// INSERT … SELECT would register something like it; these benchmarks ask
// what it costs an item.
//
// The tally stands in for RETURNING, which the fan-out cannot use: SQLite
// runs a RETURNING clause as a trigger, so the INSERT may abort and
// writes every page it touches to a statement journal first, which
// doubled the time of BenchmarkFeedRowsPackedLanes's batches.
const packItemsFunc = "bench_pack_items"

// packTally, when set, is told each packed group's viewer and items.
var packTally atomic.Pointer[func(viewer int64, items int)]

var registerPackItems = sync.OnceValue(func() error {
	return sqlite.RegisterFunction(packItemsFunc, &sqlite.FunctionImpl{
		NArgs: 3,
		MakeAggregate: func(sqlite.FunctionContext) (sqlite.AggregateFunction, error) {
			return &packItems{}, nil
		},
	})
})

// packItems is one group's items being gathered.
type packItems struct {
	viewer int64
	items  []packedItem
}

func (p *packItems) Step(_ *sqlite.FunctionContext, args []driver.Value) error {
	var n [3]int64
	for i, a := range args {
		v, ok := a.(int64)
		if !ok {
			return fmt.Errorf("%s: want integers, got %T", packItemsFunc, a)
		}
		n[i] = v
	}
	p.viewer = n[0]
	p.items = append(p.items, packedItem{n[1], n[2]})
	return nil
}

func (p *packItems) WindowInverse(*sqlite.FunctionContext, []driver.Value) error {
	return errors.New(packItemsFunc + " is not a window function")
}

func (p *packItems) WindowValue(*sqlite.FunctionContext) (driver.Value, error) {
	slices.SortFunc(p.items, oldestFirst)
	return packChunk(p.items), nil
}

func (p *packItems) Final(*sqlite.FunctionContext) {
	if tally := packTally.Load(); tally != nil {
		(*tally)(p.viewer, len(p.items))
	}
}

// packChunk encodes items, in their order, as a chunk.
func packChunk(items []packedItem) []byte {
	blob := make([]byte, 0, 16*len(items))
	for _, it := range items {
		blob = binary.BigEndian.AppendUint64(blob, uint64(it.s))
		blob = binary.BigEndian.AppendUint64(blob, uint64(it.r))
	}
	return blob
}

// packWriter opens path as ceilingWriter does, with pack_items registered
// first (the driver gives a function to the connections it opens after).
func packWriter(b *testing.B, path string) *sql.DB {
	b.Helper()
	if err := registerPackItems(); err != nil {
		b.Fatal(err)
	}
	return ceilingWriter(b, path)
}

// BenchmarkPackItems measures what packing feed items in SQL costs an
// item, the first unknown the thirty-eighth round of docs/benchmarks.md
// left for packed feed rows: the fan-out is one INSERT … SELECT, so its
// items would be grouped by viewer and packed by an aggregate inside it.
//
// Each arm runs over BenchmarkFeedRowsCeiling's rows of a 30,000-event
// batch (480,000 items for 10,000 viewers, made by ceilingRows and sorted
// by viewer) and only counts what it makes, so the arms differ by one
// step each:
//   - rows: the rows alone, which the ceiling's INSERT … SELECT also makes;
//   - group: grouped by viewer, count(*) a group (what grouping costs);
//   - go: grouped, packed by the Go aggregate pack_items (a call from
//     SQLite into Go a row);
//   - hex: grouped, packed by SQLite's own functions (printf to hex text,
//     group_concat, unhex once a group), no Go in the loop.
//
// ns/item is an arm's time over its items; subtract the rows arm's to
// get what grouping and packing add. Each arm checks what it made: the
// rows, the groups, and 16 bytes an item.
//
//	go test ./feeds -run '^$' -bench PackItems -benchtime 10x
func BenchmarkPackItems(b *testing.B) {
	const items = 30_000 * ceilingRowsPerEvent
	// The rows' columns, named for the arms.
	with := `WITH c(v, s, r) AS (` + ceilingRows(items, ceilingViewers) + `) `
	for _, arm := range []struct {
		name, query string
		want        int64
	}{
		{"rows", `SELECT count(*) FROM c`, items},
		{"group", `SELECT count(*) FROM (SELECT v, count(*) FROM c GROUP BY v)`, ceilingViewers},
		{"go", `SELECT sum(length(p)) FROM (SELECT v, ` + packItemsFunc + `(v, s, r) AS p FROM c GROUP BY v)`, items * 16},
		{"hex", `SELECT sum(length(p)) FROM (SELECT v, unhex(group_concat(printf('%016x%016x', s, r), '')) AS p FROM c GROUP BY v)`, items * 16},
	} {
		b.Run("arm="+arm.name, func(b *testing.B) {
			db := packWriter(b, b.TempDir()+"/p.db")
			var took time.Duration
			round := 0
			for b.Loop() {
				start := time.Now()
				var got int64
				if err := db.QueryRow(with+arm.query, round).Scan(&got); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				if got != arm.want {
					b.Fatalf("made %d, want %d", got, arm.want)
				}
				round++
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(b.N*items), "ns/item")
		})
	}
}
