package feeds

import (
	"testing"
)

// TestSweepTrimsACelebrityFanoutWithinItsTickBound: a post fanned out to
// 50k viewers who were all at cap is trimmed within
// ceil(G / (sweep_actors/2)) ticks through the grown queue, while no tick
// visits more than its budget.
func TestSweepTrimsACelebrityFanoutWithinItsTickBound(t *testing.T) {
	t.Parallel()
	viewers, actors := 50_000, 500
	if raceEnabled {
		// Same tick bound (200) at a 25th of the rows: under the race
		// detector the full size takes over half a minute. Run without
		// -race for the 50k case.
		viewers, actors = 2_000, 20
	}
	const cap = 2
	feeds := followingPosts(cap)
	s := openSweep(t, t.TempDir()+"/appview.db", feeds, SweepOptions{Actors: actors})
	seedFollowers(t, s, viewers)
	// Every viewer at cap, the sweep idle: no pass due, nothing queued.
	apply(t, s, post("author", "p1", 10), post("author", "p2", 11))
	if _, err := s.writer.Exec(`DELETE FROM sweep_grown`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.writer.Exec(`UPDATE sweep_state SET last_pass_end_us = ?`, t0.UnixMicro()); err != nil {
		t.Fatal(err)
	}

	res := apply(t, s, post("author", "p3", 12))
	if res.FanoutRows != int64(viewers) {
		t.Fatalf("fan-out wrote %d rows, want %d", res.FanoutRows, viewers)
	}
	if got := querySQL[int](t, s, `SELECT count(*) FROM sweep_grown`); got != 1 {
		t.Fatalf("the fan-out queued %d grown entries, want one for the author", got)
	}
	bound := (viewers + actors/2 - 1) / (actors / 2)
	ticks, deleted := 0, int64(0)
	for mutated := true; ; mutated = false {
		r := tick(t, s, t0, mutated) // fails the test if a tick exceeds its budget
		ticks++
		deleted += r.RowsDeleted
		if !r.Pending {
			break
		}
		if ticks > bound+2 {
			t.Fatalf("still pending after %d ticks, bound %d", ticks, bound)
		}
	}
	if got := feedsOverCap(t, s); got != 0 {
		t.Fatalf("%d feeds over cap after %d ticks", got, ticks)
	}
	if deleted != int64(viewers) {
		t.Fatalf("deleted %d rows, want one per viewer (%d)", deleted, viewers)
	}
	t.Logf("%d grown viewers trimmed in %d ticks (bound %d)", viewers, ticks, bound)
}
