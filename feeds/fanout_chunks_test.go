package feeds

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
)

// A transaction whose fan-out passes the row bound is written in chunks of
// consecutive records, each within the bound but for a record over it on
// its own, and every follower still gets every post.
func TestAFanoutOverItsRowBoundIsWrittenInChunks(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	s.fanoutRowBound = 3
	for i, v := range []string{"alice", "bob", "carol", "dave"} {
		apply(t, s, follow(v, "star", "s"+v, int64(i+1)))
	}
	apply(t, s, follow("alice", "mid", "m1", 10), follow("bob", "mid", "m2", 11), follow("alice", "low", "l1", 12))

	batch := []Change{
		post("low", "p1", 100), post("mid", "p2", 101), post("star", "p3", 102),
		post("mid", "p4", 103), post("lone", "p5", 104), post("low", "p6", 105), post("star", "p7", 106),
	}
	s.writeMu.Lock()
	w, err := s.begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		if err := w.apply(&batch[i]); err != nil {
			t.Fatal(err)
		}
	}
	chunks, err := w.planFanout()
	if err != nil {
		t.Fatal(err)
	}
	// Rows a record fans out to: low 1, mid 2, star 4, lone 0.
	if got, want := chunkSizes(chunks), []int{2, 1, 3, 1}; !slices.Equal(got, want) {
		t.Errorf("records per chunk = %v, want %v", got, want)
	}
	if err := w.commit(); err != nil {
		t.Fatal(err)
	}
	s.writeMu.Unlock()
	if w.res.FanoutRows != 14 {
		t.Errorf("fan-out wrote %d rows, want 14", w.res.FanoutRows)
	}
	for viewer, want := range map[string][]string{
		"alice": {"p7", "p6", "p4", "p3", "p2", "p1"},
		"bob":   {"p7", "p4", "p3", "p2"},
		"carol": {"p7", "p3"},
		"dave":  {"p7", "p3"},
	} {
		if got := feedRKeys(t, s, "following", viewer, postNSID); !slices.Equal(got, want) {
			t.Errorf("%s's feed = %v, want %v", viewer, got, want)
		}
	}
}

func chunkSizes(chunks []fanoutChunk) []int {
	var out []int
	for _, c := range chunks {
		out = append(out, c.records)
	}
	return out
}

// The planner's chunks cover every record once, in id order; each stays
// within the bound unless it holds one record; and each is as long as the
// bound lets it be.
func TestFanoutPlannerChunksAreBoundedAndFull(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 7))
	for round := range 2000 {
		bound := int64(1 + rnd.IntN(50))
		var ids []int64
		rows := map[int64]int64{}
		p := fanoutPlanner{bound: bound}
		id := int64(rnd.IntN(5))
		for range rnd.IntN(40) {
			id += int64(1 + rnd.IntN(3))
			ids = append(ids, id)
			for range 1 + rnd.IntN(2) { // one row per lane carrying the record
				n := int64(rnd.IntN(30))
				if rnd.IntN(10) == 0 {
					n = bound + int64(rnd.IntN(100))
				}
				rows[id] += n
				p.add(id, n)
			}
		}
		chunks := p.done()
		next := 0 // the first record no chunk has covered yet
		for ci, c := range chunks {
			var sum int64
			covered := 0
			for next < len(ids) && ids[next] <= c.last {
				if ids[next] < c.first {
					t.Fatalf("round %d: record %d falls before chunk %d %+v", round, ids[next], ci, c)
				}
				sum += rows[ids[next]]
				covered++
				next++
			}
			if covered != c.records || covered == 0 {
				t.Fatalf("round %d: chunk %d %+v covers %d records", round, ci, c, covered)
			}
			if sum > bound && c.records > 1 {
				t.Fatalf("round %d: chunk %d %+v holds %d rows over the bound %d", round, ci, c, sum, bound)
			}
			if next < len(ids) && sum+rows[ids[next]] <= bound {
				t.Fatalf("round %d: chunk %d %+v ends with room for the next record", round, ci, c)
			}
		}
		if next != len(ids) {
			t.Fatalf("round %d: %d of %d records covered", round, next, len(ids))
		}
	}
}
