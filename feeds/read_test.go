package feeds

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func fmtRow(vals []any) string { return fmt.Sprint(vals...) }

func TestPaginationWhileItemsArrive(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1))
	// 30 posts, several sharing one timestamp, so the tiebreaker matters.
	var batch []Change
	for i := range 30 {
		p := post("carol", fmt.Sprintf("p%02d", i), int64(100+i/3))
		p.Rev = rev(int64(100 + i))
		batch = append(batch, p)
	}
	apply(t, s, batch...)
	ctx := context.Background()
	seen := map[string]bool{}
	q := PageQuery{Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: 10}
	var prev *PageKey
	for page := 0; page < 3; page++ {
		p, err := s.ReadFeed(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) != 10 {
			t.Fatalf("page %d has %d items", page, len(p.Items))
		}
		for _, it := range p.Items {
			if seen[it.RKey] {
				t.Fatalf("item %s repeated on page %d", it.RKey, page)
			}
			seen[it.RKey] = true
			if prev != nil && (it.Key.SortUS > prev.SortUS || (it.Key.SortUS == prev.SortUS && it.Key.RecordID >= prev.RecordID)) {
				t.Fatalf("page %d out of order: %+v after %+v", page, it.Key, *prev)
			}
			k := it.Key
			prev = &k
		}
		// New posts arrive between pages; they land above the cursor.
		apply(t, s, post("carol", fmt.Sprintf("new%d", page), int64(1000+page)))
		q.Before = p.Next
		if page < 2 && p.Next == nil {
			t.Fatalf("page %d has no cursor", page)
		}
		if page == 2 && p.Next != nil {
			t.Fatalf("last page has a cursor %+v", *p.Next)
		}
	}
	if len(seen) != 30 {
		t.Fatalf("saw %d of 30 items", len(seen))
	}
}

func TestReadUnknownViewerAndLane(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	p, err := s.ReadFeed(context.Background(), PageQuery{Feed: "following", Viewer: did("nobody"), Collection: postNSID, Limit: 5})
	if err != nil || len(p.Items) != 0 || p.Next != nil || p.Items == nil {
		t.Fatalf("unknown viewer: %+v, %v", p, err)
	}
	if _, err := s.ReadFeed(context.Background(), PageQuery{Feed: "nope", Viewer: did("x"), Collection: postNSID, Limit: 5}); err != ErrUnknownLane {
		t.Fatalf("unknown feed: err = %v, want ErrUnknownLane", err)
	}
}

// TestPageReadUsesTheIndex guards the promise that a page is an index range
// read: no temporary B-tree for ORDER BY, no scan of feed_items.
func TestPageReadUsesTheIndex(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	joined := queryPlan(t, s, readPageSQL, 1, 1, 1, 1, 10)
	if strings.Contains(joined, "TEMP B-TREE") {
		t.Errorf("page read sorts:\n%s", joined)
	}
	if !strings.Contains(joined, "SEARCH fi USING PRIMARY KEY (viewer_id=? AND target_id=?") {
		t.Errorf("page read does not seek the feed_items primary key:\n%s", joined)
	}
	if strings.Contains(joined, "SCAN") {
		t.Errorf("page read scans:\n%s", joined)
	}
	joined = queryPlan(t, s, readRecordsSQL, "[1,2,3]")
	for _, want := range []string{"SEARCH r USING INTEGER PRIMARY KEY", "SEARCH a USING INTEGER PRIMARY KEY"} {
		if !strings.Contains(joined, want) {
			t.Errorf("page records read: no %q:\n%s", want, joined)
		}
	}
}

// queryPlan returns EXPLAIN QUERY PLAN's details for query on the read
// pool, one per line.
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.reader.Query(`EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "\n")
}

func TestFanoutStatementsUseIndexes(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	if _, err := prepareFanout(context.Background(), s.writer, false); err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]string{
		"fanout":       fanoutSQL.apply + audienceFilter(false) + fanoutOrder,
		"fanout grown": fanoutSQL.grown,
		"row bounds":   fanoutSQL.rowBounds,
		"unfeedRecord": writeSQL.unfeedRecord,
		"unmerge":      writeSQL.unmerge,
		"unfeedAuthor": writeSQL.unfeedAuthor,
		"merge":        writeSQL.merge,
	} {
		rows, err := s.writer.Query(`EXPLAIN QUERY PLAN `+q, 1, 1, 1, 1, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			rows.Scan(&id, &parent, &notused, &detail)
			plan = append(plan, detail)
		}
		rows.Close()
		if strings.HasPrefix(name, "fanout") && (len(plan) == 0 || !(strings.HasPrefix(plan[0], "SCAN p") || strings.HasPrefix(plan[0], "SEARCH p "))) {
			t.Errorf("%s does not start from the pending records:\n%s", name, strings.Join(plan, "\n"))
		}
		for _, line := range plan {
			// The fan-out scans the transaction's own pending records (p)
			// and nothing else.
			if strings.HasPrefix(line, "SCAN f") || strings.HasPrefix(line, "SCAN feed_items") || strings.HasPrefix(line, "SCAN r") {
				t.Errorf("%s scans a table:\n%s", name, strings.Join(plan, "\n"))
			}
		}
	}
}
