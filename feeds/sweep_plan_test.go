package feeds

import (
	"strings"
	"testing"
)

func explain(tb testing.TB, s *Store, q string, args ...any) string {
	tb.Helper()
	rows, err := s.writer.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		tb.Fatalf("explain %s: %v", q, err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			tb.Fatal(err)
		}
		b.WriteString(detail + "\n")
	}
	return b.String()
}

// TestSweepStatementsUseTheirIndexes keeps every statement of a slice and a
// retention slice a bounded index walk: none may scan a table or sort.
func TestSweepStatementsUseTheirIndexes(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	q := sweepSQL
	for _, c := range []struct {
		name, sql, want string
		args            []any
	}{
		{"cutoff", q.cutoff, "feed_items USING PRIMARY KEY (viewer_id=? AND target_id=?)", []any{1, 1, 200}},
		{"trim", q.trim, "feed_items USING PRIMARY KEY (viewer_id=? AND target_id=? AND (sort_us,record_id)", []any{1, 1, 1, 1}},
		{"clearLane", q.clearLane, "feed_items USING PRIMARY KEY (viewer_id=? AND target_id=?)", []any{1, 1}},
		{"nextViewers", q.nextViewers, "feed_items USING PRIMARY KEY (viewer_id>?)", []any{0, 500}},
		{"grownFollowers", q.grownFollowers, "follows_by_subject (subject_id=? AND collection_id=? AND actor_id>?)", []any{1, 1, 0, 250}},
		{"retainWindow", q.retainWindow, "records_by_indexed", []any{0, 0, 1, 1000}},
		{"retainProbes", q.retainProbes, "follows_by_subject (subject_id=? AND collection_id=?)", []any{1, 1, 100_001}},
		{"retainRecords", q.retainRecords, "fi USING PRIMARY KEY (viewer_id=? AND target_id=? AND sort_us=? AND record_id=?)", []any{0, 0, 1, 1, 1, "2222222222222", 0}},
		{"retainTombstones", q.retainTombstones, "tombstones_by_deleted (deleted_us<?)", []any{1, 1000}},
		{"retainListing", q.retainListing, "listings USING PRIMARY KEY (actor_id=? AND collection_id=?)", []any{1, 1}},
		{"grownAgain", q.grownAgain, "(author_id=? AND collection_id=?)", []any{1, 1}},
	} {
		plan := explain(t, s, c.sql, c.args...)
		if !strings.Contains(plan, c.want) {
			t.Errorf("%s does not use %s:\n%s", c.name, c.want, plan)
		}
		for _, bad := range []string{"SCAN feed_items", "SCAN records", "SCAN follows", "SCAN tombstones", "TEMP B-TREE"} {
			if strings.Contains(plan, bad) {
				t.Errorf("%s: %s:\n%s", c.name, bad, plan)
			}
		}
	}
}
