package feeds

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkFanoutViewers shows that fan-out cost follows viewers, not
// followers: outside index_all mode an author followed by 1M accounts of
// whom 10k read their feeds costs what an author with 10k followers who
// all read costs, because the 990k other follow records were skipped at
// ingest and never stored.
//
//	go test ./feeds -run '^$' -bench FanoutViewers -benchtime 20x
func BenchmarkFanoutViewers(b *testing.B) {
	for _, tc := range []struct{ followers, viewers int }{{10_000, 10_000}, {1_000_000, 10_000}} {
		b.Run(fmt.Sprintf("followers=%d/viewers=%d", tc.followers, tc.viewers), func(b *testing.B) {
			s := mustOpenWith(b, Options{Path: b.TempDir() + "/appview.db", Feeds: defaultFeeds})
			seedViewers(b, s, tc.viewers)
			// The rest of the followers arrive on the stream and are skipped.
			var batch []Change
			for i := tc.viewers; i < tc.followers; i++ {
				batch = append(batch, follow(fmt.Sprint("stranger", i), "author", "f1", int64(i+10)))
				if len(batch) == 10_000 {
					if res := apply(b, s, batch...); res.OutOfScope != len(batch) {
						b.Fatalf("strangers' follows stored: %+v", res)
					}
					batch = batch[:0]
				}
			}
			var rows int64
			var took time.Duration
			i := 0
			for b.Loop() {
				i++
				start := time.Now()
				res, err := s.ApplyBatch(context.Background(), &Batch{Changes: []Change{post("author", fmt.Sprint("p", i), int64(10_000_000+i))}})
				took += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if res.FanoutRows != int64(tc.viewers) {
					b.Fatalf("fan-out wrote %d rows, want %d", res.FanoutRows, tc.viewers)
				}
				rows += res.FanoutRows
			}
			b.ReportMetric(float64(took.Microseconds())/float64(i), "µs/post")
			b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
		})
	}
}

// seedViewers registers n viewers of "following" who all follow "author",
// in bulk SQL.
func seedViewers(tb testing.TB, s *Store, n int) {
	tb.Helper()
	if _, err := s.RegisterViewer(context.Background(), did("author"), "following", time.Unix(1, 0)); err != nil {
		tb.Fatal(err)
	}
	var author int64
	if err := s.writer.QueryRow(`SELECT id FROM actors WHERE did = ?`, string(did("author"))).Scan(&author); err != nil {
		tb.Fatal(err)
	}
	for _, q := range []string{
		`WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
		 INSERT INTO actors (did) SELECT 'did:plc:viewer' || i FROM seq`,
		`INSERT INTO viewers (actor_id, feed, state, registered_us, last_read_us)
		 SELECT id, 'following', 'complete', 1, 1 FROM actors WHERE did LIKE 'did:plc:viewer%'`,
		`INSERT INTO follows (actor_id, collection_id, rkey, subject_id, rev)
		 SELECT id, ?2, 'f1', ?3, '2222222222222' FROM actors WHERE did LIKE 'did:plc:viewer%'`,
	} {
		if _, err := s.writer.Exec(q, n, s.followColls[followNSID], author); err != nil {
			tb.Fatal(err)
		}
	}
}
