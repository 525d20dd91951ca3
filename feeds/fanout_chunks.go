package feeds

import "fmt"

// The fan-out's ORDER BY sorts in memory: temp_store is memory, and
// SQLite's sorter then keeps every row it is given, about 64 bytes a row,
// until the statement ends. A catch-up batch at 100,000 viewers fans out
// about 2M rows, and one batch holding two posts by an author with a
// million viewer-followers took 121 MiB more at its peak
// (BenchmarkFanoutSortMemory). So a transaction's pending
// records are fanned out in chunks of consecutive record ids, each with a
// bound on its rows (Store.fanoutRowBound); every chunk still walks the
// feed table front to back. A record whose bound alone passes it is a
// chunk of its own and is written unsorted: one record's rows come in
// follower order already.

// maxSortedFanoutRows is the default bound on the rows one fan-out
// statement sorts: about 4 MB of sorter memory. A catch-up batch of 25,000
// posts at 10,000 viewers (about 500,000 rows) fanned out as fast or
// faster in chunks of this bound than sorted whole, and slower at a
// quarter of it (BenchmarkFanoutOrder, docs/benchmarks.md).
const maxSortedFanoutRows = 1 << 16

// fanoutChunk is a range of pending record ids fanned out by one statement.
type fanoutChunk struct {
	first, last int64 // record ids, both included
	records     int
}

// planFanout splits the pending records into chunks by the bound on their
// rows (fanoutSQL.rowBounds).
func (w *txWriter) planFanout() ([]fanoutChunk, error) {
	rows, err := w.stmt(w.s.stmts.fan.rowBounds).QueryContext(w.ctx)
	if err != nil {
		return nil, fmt.Errorf("bound fan-out rows: %w", err)
	}
	defer rows.Close()
	p := fanoutPlanner{bound: w.s.fanoutRowBound}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("bound fan-out rows: %w", err)
		}
		p.add(id, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bound fan-out rows: %w", err)
	}
	return p.done(), nil
}

// fanoutPlanner cuts records, given in id order with a bound on the rows
// of each (a record given twice has its bounds added), into chunks whose
// bounds add up to no more than bound, but for a record whose bound alone
// passes it.
type fanoutPlanner struct {
	bound  int64
	chunks []fanoutChunk
	// rows is the open chunk's sum (the last of chunks); id and n are the
	// record being summed over its lanes, placed once the next begins.
	rows  int64
	id, n int64
	any   bool
}

func (p *fanoutPlanner) add(id, n int64) {
	if p.any && id == p.id {
		p.n += n
		return
	}
	p.place()
	p.id, p.n, p.any = id, n, true
}

// place puts the record summed so far into the open chunk, or opens one
// for it when it would push the open one past the bound.
func (p *fanoutPlanner) place() {
	if !p.any {
		return
	}
	if len(p.chunks) == 0 || p.rows+p.n > p.bound {
		p.chunks = append(p.chunks, fanoutChunk{first: p.id})
		p.rows = 0
	}
	c := &p.chunks[len(p.chunks)-1]
	c.last = p.id
	c.records++
	p.rows += p.n
}

// done places the last record and returns the chunks.
func (p *fanoutPlanner) done() []fanoutChunk {
	p.place()
	p.any = false
	return p.chunks
}
