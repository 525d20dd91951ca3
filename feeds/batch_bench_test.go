package feeds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
				author := fmt.Sprint("a", rng.IntN(viewersBenchAccounts))
				if ts%10 == 0 {
					return follow(author, fmt.Sprint("a", rng.IntN(viewersBenchAccounts)), fmt.Sprint("nf", ts), ts)
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
	s := openViewersBench(b, defaultFeeds)
	rng := rand.New(rand.NewPCG(1, 2))
	var rows int64
	eps := streamBatchesWith(b, s, 5000, func(ts int64) Change {
		author := fmt.Sprint("a", rng.IntN(viewersBenchAccounts))
		if ts%10 == 0 {
			return follow(author, fmt.Sprint("a", rng.IntN(viewersBenchAccounts)), fmt.Sprint("nf", ts), ts)
		}
		return post(author, fmt.Sprint("p", ts), ts)
	}, func(r BatchResult) { rows += r.FanoutRows })
	if rows == 0 {
		b.Fatal("no fan-out: the viewers are not registered")
	}
	b.ReportMetric(eps, "events/s")
	b.ReportMetric(float64(rows)/float64(b.N), "rows/event")
}

// viewersBenchAccounts is how many accounts the Viewers benchmarks seed.
const viewersBenchAccounts = 10_000

// openViewersBench opens the store of the Viewers benchmarks: accounts
// following 20 others each, every one a registered viewer of "following".
func openViewersBench(b *testing.B, feeds []Feed) *Store {
	s := mustOpenWith(b, Options{Path: b.TempDir() + "/appview.db", Feeds: feeds, RecordCacheMB: 4})
	seedGraph(b, s, viewersBenchAccounts, 20)
	if _, err := s.writer.Exec(`INSERT OR IGNORE INTO viewers (actor_id, feed, state, registered_us, last_read_us)
		SELECT id, 'following', 'complete', 1, 1 FROM actors WHERE did LIKE 'did:plc:a%'`); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkApplyBatchViewersMix is BenchmarkApplyBatchViewers with the
// workload's mix of operations: of every 100 events, 85 post creates, 5
// deletes of a recent post, 8 follows and 2 unfollows of a recent follow.
// What is deleted is from the older half of the last 20,000 creates, so
// mostly from earlier batches, in feeds. Count its instructions as
// BenchmarkApplyBatchViewers's.
func BenchmarkApplyBatchViewersMix(b *testing.B) {
	s := openViewersBench(b, defaultFeeds)
	streamMix(b, s, func(batch *Batch) (BatchResult, error) {
		return s.ApplyBatch(context.Background(), batch)
	})
}

// BenchmarkIngestTickMix is the daemon's writer loop: each batch of
// BenchmarkApplyBatchViewersMix followed by its sweep tick, as the
// ingester runs them. Every feed starts at its cap of 200 (older rows
// than the stream's), so the sweep trims from the first batch as it does
// at steady state. Count its instructions as
// BenchmarkApplyBatchViewers's.
func BenchmarkIngestTickMix(b *testing.B) {
	s := openViewersBench(b, defaultFeeds)
	if _, err := s.writer.Exec(`
		WITH RECURSIVE k(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM k WHERE j < 200)
		INSERT INTO feed_items (viewer_id, target_id, sort_us, record_id)
		SELECT v.actor_id, t.id, k.j, -k.j FROM viewers v CROSS JOIN feed_targets t CROSS JOIN k
		WHERE t.enabled = 1`); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var trimmed int64
	streamMix(b, s, func(batch *Batch) (BatchResult, error) {
		res, err := s.ApplyBatch(ctx, batch)
		if err != nil {
			return res, err
		}
		tick, err := s.SweepTick(ctx, Tick{Now: time.Unix(1_000, 0), Mutated: res.MutatedFeeds(), Rows: res.FanoutRows + res.MergedRows})
		trimmed += tick.RowsDeleted
		return res, err
	})
	if b.N >= mixExercisedAt && trimmed == 0 {
		b.Fatal("the sweep trimmed nothing")
	}
	b.ReportMetric(float64(trimmed)/float64(b.N), "trimmed/event")
}

// mixExercisedAt is the stream length from which the Mix benchmarks check
// that they did what they are for: deletes reach posts of earlier batches
// only after a few batches of 5,000.
const mixExercisedAt = 20_000

// streamMix streams the mix of BenchmarkApplyBatchViewersMix through
// apply in batches of 5,000.
func streamMix(b *testing.B, s *Store, apply func(*Batch) (BatchResult, error)) {
	const recent = 20_000
	rng := rand.New(rand.NewPCG(1, 2))
	type ref struct{ author, rkey string }
	var posts, follows []ref // recent creates, oldest first
	pick := func(refs *[]ref) (ref, bool) {
		if len(*refs) < 2 {
			return ref{}, false
		}
		i := rng.IntN(len(*refs) / 2)
		r := (*refs)[i]
		*refs = slices.Delete(*refs, i, i+1)
		return r, true
	}
	keep := func(refs *[]ref, r ref) {
		if *refs = append(*refs, r); len(*refs) > recent {
			*refs = (*refs)[1:]
		}
	}
	var rows, removed int64
	eps := streamApplied(b, 5000, apply, func(ts int64) Change {
		author := fmt.Sprint("a", rng.IntN(viewersBenchAccounts))
		switch k := ts % 100; {
		case k < 5:
			if r, ok := pick(&posts); ok {
				return unpost(r.author, r.rkey, ts)
			}
		case k < 13:
			r := ref{author, fmt.Sprint("nf", ts)}
			keep(&follows, r)
			return follow(author, fmt.Sprint("a", rng.IntN(viewersBenchAccounts)), r.rkey, ts)
		case k < 15:
			if r, ok := pick(&follows); ok {
				return unfollow(r.author, r.rkey, ts)
			}
		}
		r := ref{author, fmt.Sprint("p", ts)}
		keep(&posts, r)
		return post(author, r.rkey, ts)
	}, func(r BatchResult) { rows += r.FanoutRows; removed += r.RemovedRows })
	if b.N >= mixExercisedAt && (rows == 0 || removed == 0) {
		b.Fatalf("fan-out wrote %d rows and removed %d: the mix is not exercised", rows, removed)
	}
	b.ReportMetric(eps, "events/s")
	b.ReportMetric(float64(rows)/float64(b.N), "rows/event")
	b.ReportMetric(float64(removed)/float64(b.N), "removed/event")
}

// streamBatches applies one change per benchmark iteration, made by next
// from a rising time_us, in batches of size, and returns the events per
// second spent in ApplyBatch.
func streamBatches(b *testing.B, s *Store, size int, next func(ts int64) Change) float64 {
	return streamBatchesWith(b, s, size, next, func(BatchResult) {})
}

// streamBatchesWith is streamBatches telling done each batch's result.
func streamBatchesWith(b *testing.B, s *Store, size int, next func(ts int64) Change, done func(BatchResult)) float64 {
	return streamApplied(b, size, func(batch *Batch) (BatchResult, error) {
		return s.ApplyBatch(context.Background(), batch)
	}, next, done)
}

// streamApplied is streamBatchesWith with the batch applied by apply.
func streamApplied(b *testing.B, size int, apply func(*Batch) (BatchResult, error), next func(ts int64) Change, done func(BatchResult)) float64 {
	batch := &Batch{Changes: make([]Change, 0, size)}
	ts := int64(1_000_000)
	var events int
	var took time.Duration
	flush := func() {
		start := time.Now()
		res, err := apply(batch)
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
