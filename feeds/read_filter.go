package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// DefaultScanLimit bounds the feed rows one filtered page examines. A
// lane holds at most its cap rows, so with the default cap (200) a
// filtered read always sees the whole feed; the bound matters for large
// caps and rare values. docs/benchmarks.md has the measured cost.
const DefaultScanLimit = 5000

// ErrUnknownField is returned for a filter on a field the page's
// collection does not declare, or one used against its kind.
var ErrUnknownField = errors.New("unknown field")

// filterScanSQL walks the lane in page order from the cursor, as
// readPageSQL does, and says of each row whether its record matches: the
// conditions (one EXISTS per filter) are primary-key seeks into
// record_fields, so a row costs the same however many records hold the
// value. The LIMIT is the scan bound.
const filterScanSQL = `
	SELECT fi.sort_us, fi.record_id, %s
	FROM feed_items fi
	WHERE fi.viewer_id = ? AND fi.target_id = ? AND (fi.sort_us, fi.record_id) < (?, ?)
	ORDER BY fi.sort_us DESC, fi.record_id DESC
	LIMIT ?`

// The conditions, one per filter; each takes (field id, value) or
// (field id, min, max).
const (
	equalsCond = `EXISTS (SELECT 1 FROM record_fields rf WHERE rf.record_id = fi.record_id AND rf.field_id = ? AND rf.value = ?)`
	rangeCond  = `EXISTS (SELECT 1 FROM record_fields rf WHERE rf.record_id = fi.record_id AND rf.field_id = ? AND rf.value BETWEEN ? AND ?)`
)

// readFiltered reads a filtered page. It walks the viewer's lane newest
// first, examining at most the scan limit rows, and keeps the rows whose
// record matches every filter. When the bound runs out before the page
// fills, the page is short (maybe empty) and Next is the last examined
// row, so a client paging on reaches the rest; sorting stays newest first.
// Both reads share one snapshot, so a matched record cannot be missing.
func (s *Store) readFiltered(ctx context.Context, l *lane, viewerID int64, before PageKey, q PageQuery) (Page, error) {
	conds, args, err := l.filterSQL(q.Filters)
	if err != nil {
		return Page{}, err
	}
	scan := q.ScanLimit
	if scan <= 0 {
		scan = DefaultScanLimit
	}
	epoch := s.recordCache.snapshot()
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Page{}, fmt.Errorf("read feed: %w", err)
	}
	defer tx.Rollback()

	args = append(args, viewerID, l.id, before.SortUS, before.RecordID, scan)
	rows, err := tx.QueryContext(ctx, fmt.Sprintf(filterScanSQL, conds), args...)
	if err != nil {
		return Page{}, fmt.Errorf("scan feed: %w", err)
	}
	var matched []PageKey
	var last PageKey
	examined := 0
	for rows.Next() {
		var k PageKey
		var match bool
		if err := rows.Scan(&k.SortUS, &k.RecordID, &match); err != nil {
			rows.Close()
			return Page{}, fmt.Errorf("scan feed: %w", err)
		}
		examined++
		last = k
		if match {
			matched = append(matched, k)
			if len(matched) > q.Limit {
				break
			}
		}
	}
	if err := rows.Close(); err != nil {
		return Page{}, fmt.Errorf("scan feed: %w", err)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("scan feed: %w", err)
	}

	s.metrics.observeFilterScan(examined)
	page := Page{Examined: examined}
	switch {
	case len(matched) > q.Limit:
		matched = matched[:q.Limit]
		next := matched[q.Limit-1]
		page.Next = &next
	case examined == scan:
		page.Next = &last
	}
	// The records come from the scan's snapshot, not the cache: a newer
	// version might no longer match the filters.
	page.Items, err = s.pageItems(ctx, pageRecords{stmt: tx.StmtContext(ctx, s.reads.records), epoch: epoch}, l, matched)
	return page, err
}

// filterSQL turns filters into the scan's condition column and its
// arguments, checking each against the lane's declared fields.
func (l *lane) filterSQL(filters []Filter) (string, []any, error) {
	conds := make([]string, 0, len(filters))
	var args []any
	for _, f := range filters {
		lf, ok := l.fields[f.Field]
		if !ok {
			return "", nil, fmt.Errorf("%w: %s is not declared for %s", ErrUnknownField, f.Field, l.collection)
		}
		if lf.kind.Range() {
			conds = append(conds, rangeCond)
			args = append(args, lf.id, f.Min, f.Max)
		} else {
			conds = append(conds, equalsCond)
			args = append(args, lf.id, f.Equals)
		}
	}
	return strings.Join(conds, " AND "), args, nil
}
