package feeds

import (
	"math"
	"testing"
	"time"
)

// BenchmarkRetentionSliceCelebrity: one retention slice over old posts of
// an author with 20,000 followers that no feed holds, so every record's
// check probes all 20,000 lanes. "budget" is the daemon's probe budget;
// "unbounded" is the slice before it had one (1,000 records, 20M probes).
//
//	go test ./feeds -run '^$' -bench RetentionSliceCelebrity -benchtime 3x
func BenchmarkRetentionSliceCelebrity(b *testing.B) {
	for _, bc := range []struct {
		name   string
		budget int64
	}{{"budget", retentionProbeBudget}, {"unbounded", math.MaxInt64 / 2}} {
		b.Run(bc.name, func(b *testing.B) {
			s := openSweep(b, b.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Retention: time.Hour, TombstoneWindow: -1})
			s.sweep.probeBudget = bc.budget
			for _, q := range []string{
				`INSERT INTO actors (did) VALUES ('did:plc:celebrity')`,
				`WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < 20000)
				 INSERT INTO actors (did) SELECT 'did:plc:v' || i FROM seq`,
				`INSERT INTO follows (actor_id, collection_id, rkey, subject_id, rev)
				 SELECT id, ?2, 'f', 1, 'rev' FROM actors WHERE id > 1`,
				`WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < 100000)
				 INSERT INTO records (actor_id, collection_id, rkey, cid, rev, sort_us, indexed_us, created_us, body)
				 SELECT 1, ?1, 'r' || i, 'c', 'rev', 10 + i, 10 + i, 0, '{}' FROM seq`,
			} {
				if _, err := s.writer.Exec(q, s.targetColls[postNSID], s.followColls[followNSID]); err != nil {
					b.Fatal(err)
				}
			}
			apply(b, s, post("other", "now", 10*hourUS))
			var retired int64
			b.ResetTimer()
			for range b.N {
				r := tick(b, s, t0, false)
				retired += r.RecordsRetired
			}
			b.ReportMetric(float64(retired)/float64(b.N), "records/slice")
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/slice")
		})
	}
}
