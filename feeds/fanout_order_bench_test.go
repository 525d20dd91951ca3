package feeds

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkFanoutOrder measures why a transaction's fan-out is written in
// primary-key order (fanout.go): the same pending posts of one catch-up
// batch fanned out by the sorted statement and by the same statement
// without ORDER BY (the order posts arrived in), into a feed table at cap.
// 10k viewers each follow 20 of 10k authors and hold 200 items; a batch
// is 5,000 posts by random authors, about 100k feed rows, or 25,000, about
// 500k, as a catch-up batch of 30,000 events at 10k viewers writes. The
// sorted statement runs over the whole batch, and chunked by bounds on the
// rows one statement sorts (fanout_chunks.go; the time includes the
// bounds' query). Each iteration rolls back, so every one starts from the
// same table.
//
//	go test ./feeds -run '^$' -bench FanoutOrder -benchtime 5x
func BenchmarkFanoutOrder(b *testing.B) {
	const viewers, authors, follows, perViewer = 10_000, 10_000, 20, 200
	ctx := context.Background()
	s := mustOpenWith(b, Options{Path: b.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: true})
	w, err := s.begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	followColl, laneID := s.followColls[followNSID], s.lanes[0].id
	seed := []string{
		// Actors 1…viewers are viewers, viewers+1… authors.
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 + ?2)
			INSERT INTO actors (id, did) SELECT i, 'did:plc:bench' || i FROM n`,
		// Viewer v follows authors (v·7 + k·503) mod authors: spread out.
		`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 * ?3 - 1)
			INSERT OR IGNORE INTO follows (actor_id, collection_id, rkey, subject_id, rev)
			SELECT 1 + i / ?3, ?4, 'f' || i, ?1 + 1 + ((i / ?3) * 7 + (i % ?3) * 503) % ?2, 'r' FROM n`,
		`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 * ?5 - 1)
			INSERT INTO feed_items (viewer_id, target_id, sort_us, record_id)
			SELECT 1 + i / ?5, ?6, i, i FROM n`,
	}
	for _, q := range seed {
		if _, err := w.tx.ExecContext(ctx, q, viewers, authors, follows, followColl, perViewer, laneID); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.tx.Commit(); err != nil {
		b.Fatal(err)
	}

	type order struct {
		name  string
		bound int64 // 0: not chunked
	}
	for _, posts := range []int{5_000, 25_000} {
		for _, o := range []order{{"arrival", 0}, {"sorted", 0}, {"chunked=262144", 1 << 18}, {"chunked=65536", 1 << 16}, {"chunked=16384", 1 << 14}, {"chunked=4096", 1 << 12}} {
			b.Run(fmt.Sprintf("posts=%d/%s", posts, o.name), func(b *testing.B) {
				fanoutOrderRun(b, s, posts, o.name == "sorted", o.bound)
			})
		}
	}
}

func fanoutOrderRun(b *testing.B, s *Store, posts int, sorted bool, bound int64) {
	const viewers, authors = 10_000, 10_000
	ctx := context.Background()
	postColl := s.targetColls[postNSID]
	var rows int64
	var took time.Duration
	rnd := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		w, err := s.begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for i := range posts {
			author := int64(viewers + 1 + rnd.IntN(authors))
			sortUS := int64(1e15) + int64(i)
			var id int64
			if err := w.tx.QueryRowContext(ctx, `INSERT INTO records (actor_id, collection_id, rkey, cid, rev, sort_us, indexed_us, created_us, body)
						VALUES (?, ?, ?, 'c', 'r', ?, ?, ?, '{}') RETURNING id`, author, postColl, fmt.Sprint("p", i), sortUS, sortUS, sortUS).Scan(&id); err != nil {
				b.Fatal(err)
			}
			if err := w.queueFanout(author, postColl, sortUS, id); err != nil {
				b.Fatal(err)
			}
		}
		// The statement without ORDER BY, in arrival order, unless
		// sorted or chunked.
		chunks := []fanoutChunk{{first: math.MinInt64, last: math.MaxInt64, records: 1}}
		if sorted {
			chunks[0].records = posts
		}
		start := time.Now()
		if bound > 0 {
			s.fanoutRowBound = bound
			if chunks, err = w.planFanout(); err != nil {
				b.Fatal(err)
			}
		}
		n, err := w.fanoutChunks(chunks)
		took += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		rows += n
		w.tx.Rollback()
	}
	b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
}
