package feeds

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
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

// BenchmarkFanoutSortMemory measures what the fan-out's in-memory sort
// costs at its peak: one batch holding two posts by an author with a
// million viewer-followers, with the row bound (fanout_chunks.go) and
// without it. It reports the growth of the process's peak RSS over the
// batch (Linux: VmHWM, reset through /proc/self/clear_refs) and rows/s.
//
//	go test ./feeds -run '^$' -bench FanoutSortMemory -benchtime 2x
func BenchmarkFanoutSortMemory(b *testing.B) {
	if _, err := peakRSS(true); err != nil {
		b.Skipf("peak RSS cannot be read or reset here: %v", err)
	}
	const n = 1_000_000
	s := MustOpen(b, defaultFeeds)
	seedFollowers(b, s, n)
	i := 0
	for _, bound := range []int64{maxSortedFanoutRows, math.MaxInt64} {
		name := "bound=default"
		if bound == math.MaxInt64 {
			name = "bound=none"
		}
		b.Run(name, func(b *testing.B) {
			s.fanoutRowBound = bound
			var grew, rows int64
			var took time.Duration
			for b.Loop() {
				before, err := peakRSS(true)
				if err != nil {
					b.Fatal(err)
				}
				i += 2
				start := time.Now()
				res, err := s.ApplyBatch(context.Background(), &Batch{Changes: []Change{
					post("author", fmt.Sprintf("m%d", i), int64(5_000_000+i)),
					post("author", fmt.Sprintf("m%d", i+1), int64(5_000_000+i+1)),
				}})
				took += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if res.FanoutRows != 2*n {
					b.Fatalf("fan-out wrote %d rows, want %d", res.FanoutRows, 2*n)
				}
				after, err := peakRSS(false)
				if err != nil {
					b.Fatal(err)
				}
				grew = max(grew, after-before)
				rows += res.FanoutRows
			}
			b.ReportMetric(float64(grew)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
		})
	}
}

// peakRSS reads the process's peak resident set (VmHWM) in bytes, first
// resetting it to the current RSS when reset is set.
func peakRSS(reset bool) (int64, error) {
	if reset {
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			return 0, err
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}
