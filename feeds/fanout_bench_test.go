package feeds

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkFanout measures the real fan-out path (ApplyBatch with one post
// by an author with N viewer-followers) and, in the same run, a bare
// INSERT … SELECT of the same N rows into a minimal integer-keyed table,
// the ceiling the real path is compared against.
//
//	go test ./feeds -run '^$' -bench Fanout -benchtime 3x
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("followers=%d", n), func(b *testing.B) {
			s := MustOpen(b, defaultFeeds)
			author := seedFollowers(b, s, n)
			// With -count the leaves run again on the same store: the
			// posts and bare rows of one run must not repeat another's.
			i := 0
			b.Run("real", func(b *testing.B) {
				var rows int64
				var took time.Duration
				for b.Loop() {
					i++
					c := post("author", fmt.Sprintf("p%d", i), int64(1_000_000+i))
					start := time.Now()
					res, err := s.ApplyBatch(context.Background(), &Batch{Changes: []Change{c}})
					took += time.Since(start)
					if err != nil {
						b.Fatal(err)
					}
					if res.FanoutRows != int64(n) {
						b.Fatalf("fan-out wrote %d rows, want %d", res.FanoutRows, n)
					}
					rows += res.FanoutRows
				}
				b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
			})
			b.Run("bare", func(b *testing.B) {
				if _, err := s.writer.Exec(`CREATE TABLE IF NOT EXISTS bare (v INTEGER, r INTEGER, PRIMARY KEY (v, r)) WITHOUT ROWID`); err != nil {
					b.Fatal(err)
				}
				var rows int64
				var took time.Duration
				for b.Loop() {
					i++
					start := time.Now()
					res, err := s.writer.Exec(`INSERT INTO bare SELECT actor_id, ? FROM follows WHERE subject_id = ? AND collection_id = ?`,
						i, author, s.followColls[followNSID])
					took += time.Since(start)
					if err != nil {
						b.Fatal(err)
					}
					got, _ := res.RowsAffected()
					rows += got
				}
				b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
			})
		})
	}
}

// seedFollowers creates n accounts that all follow one author, in bulk SQL
// (the point is to measure the fan-out, not the setup), and returns the
// author's actor id.
func seedFollowers(tb testing.TB, s *Store, n int) int64 {
	tb.Helper()
	apply(tb, s, follow("seed", "author", "f0", 1))
	var author, coll int64
	if err := s.writer.QueryRow(`SELECT id FROM actors WHERE did = ?`, string(did("author"))).Scan(&author); err != nil {
		tb.Fatal(err)
	}
	coll = s.followColls[followNSID]
	_, err := s.writer.Exec(`
		WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
		INSERT INTO actors (did) SELECT 'did:plc:follower' || i FROM seq`, n-1)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = s.writer.Exec(`
		INSERT INTO follows (actor_id, collection_id, rkey, subject_id, rev)
		SELECT id, ?1, 'f1', ?2, '2222222222222' FROM actors WHERE did LIKE 'did:plc:follower%'`, coll, author)
	if err != nil {
		tb.Fatal(err)
	}
	return author
}
