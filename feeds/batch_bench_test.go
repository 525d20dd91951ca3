package feeds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkApplyBatch measures ingest through ApplyBatch at several batch
// sizes: 10k accounts each following 20 others, a stream of post creates
// (each fans out to about 20 feeds) with a follow create every tenth
// event. It is how the batch_size default was chosen.
//
//	go test ./feeds -run '^$' -bench ApplyBatch -benchtime 20000x
func BenchmarkApplyBatch(b *testing.B) {
	for _, size := range []int{10, 100, 1000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := MustOpen(b, defaultFeeds)
			const accounts = 10_000
			seedGraph(b, s, accounts, 20)
			rng := rand.New(rand.NewPCG(1, 2))
			eps := streamBatches(b, s, size, func(ts int64) Change {
				author := fmt.Sprint("a", rng.IntN(accounts))
				if ts%10 == 0 {
					return follow(author, fmt.Sprint("a", rng.IntN(accounts)), fmt.Sprint("nf", ts), ts)
				}
				return post(author, fmt.Sprint("p", ts), ts)
			})
			b.ReportMetric(eps, "events/s")
		})
	}
}

// BenchmarkApplyBatchViewers is BenchmarkApplyBatch at batch=5000 as the
// daemon runs by default, outside index_all mode: every account is a
// registered viewer of "following", so posts are in scope through
// followedByAnyone and the fan-out checks its audience against viewers.
// Its instruction count does not move with the machine's load, which
// wall-clock runs on this VM do by ±10% (docs/benchmarks.md):
//
//	go test -c -o /tmp/feeds.test ./feeds
//	GOMAXPROCS=1 valgrind --tool=cachegrind --cache-sim=no /tmp/feeds.test \
//	  -test.run '^$' -test.bench ApplyBatchViewers -test.benchtime 40000x
func BenchmarkApplyBatchViewers(b *testing.B) {
	s := mustOpenWith(b, Options{Path: b.TempDir() + "/appview.db", Feeds: defaultFeeds, RecordCacheMB: 4})
	const accounts = 10_000
	seedGraph(b, s, accounts, 20)
	if _, err := s.writer.Exec(`INSERT OR IGNORE INTO viewers (actor_id, feed, state, registered_us, last_read_us)
		SELECT id, 'following', 'complete', 1, 1 FROM actors WHERE did LIKE 'did:plc:a%'`); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var rows int64
	eps := streamBatchesWith(b, s, 5000, func(ts int64) Change {
		author := fmt.Sprint("a", rng.IntN(accounts))
		if ts%10 == 0 {
			return follow(author, fmt.Sprint("a", rng.IntN(accounts)), fmt.Sprint("nf", ts), ts)
		}
		return post(author, fmt.Sprint("p", ts), ts)
	}, func(r BatchResult) { rows += r.FanoutRows })
	if rows == 0 {
		b.Fatal("no fan-out: the viewers are not registered")
	}
	b.ReportMetric(eps, "events/s")
	b.ReportMetric(float64(rows)/float64(b.N), "rows/event")
}

// streamBatches applies one change per benchmark iteration, made by next
// from a rising time_us, in batches of size, and returns the events per
// second spent in ApplyBatch.
func streamBatches(b *testing.B, s *Store, size int, next func(ts int64) Change) float64 {
	return streamBatchesWith(b, s, size, next, func(BatchResult) {})
}

// streamBatchesWith is streamBatches telling done each batch's result.
func streamBatchesWith(b *testing.B, s *Store, size int, next func(ts int64) Change, done func(BatchResult)) float64 {
	batch := &Batch{Changes: make([]Change, 0, size)}
	ts := int64(1_000_000)
	var events int
	var took time.Duration
	flush := func() {
		start := time.Now()
		res, err := s.ApplyBatch(context.Background(), batch)
		if err != nil {
			b.Fatal(err)
		}
		done(res)
		took += time.Since(start)
		events += len(batch.Changes)
		batch.Changes = batch.Changes[:0]
	}
	b.ReportAllocs()
	for b.Loop() {
		ts++
		batch.Changes = append(batch.Changes, next(ts))
		batch.Cursor = StreamCursor{TimeUS: ts}
		if len(batch.Changes) == size {
			flush()
		}
	}
	if len(batch.Changes) > 0 {
		flush()
	}
	return float64(events) / took.Seconds()
}

// seedGraph creates accounts a0…a(n-1), each following `each` others, in
// bulk SQL.
func seedGraph(tb testing.TB, s *Store, n, each int) {
	tb.Helper()
	apply(tb, s, follow("a0", "a1", "seed", 1))
	coll := s.followColls[followNSID]
	if _, err := s.writer.Exec(`
		WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
		INSERT OR IGNORE INTO actors (did) SELECT 'did:plc:a' || i FROM seq`, n-1); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.writer.Exec(`
		WITH RECURSIVE k(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM k WHERE j < ?3)
		INSERT OR IGNORE INTO follows (actor_id, collection_id, rkey, subject_id, rev)
		SELECT a.id, ?1, 'g' || k.j, b.id, '2222222222222'
		FROM actors a CROSS JOIN k
		JOIN actors b ON b.did = 'did:plc:a' || ((CAST(substr(a.did, 10) AS INTEGER) * 7 + k.j * 131) % ?2)
		WHERE a.did LIKE 'did:plc:a%'`, coll, n, each); err != nil {
		tb.Fatal(err)
	}
}
