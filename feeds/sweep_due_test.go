package feeds

import (
	"fmt"
	"testing"
	"time"
)

// A full pass that falls due while the grown queue keeps the idle ticks
// busy must still visit every viewer: the lap under way began before it
// fell due (here before a restart that lowered the cap), so the viewers
// behind its cursor are over cap again. Before the fix only a recovery
// slice started the pass over; the grown slices carried on the old lap,
// its wrap was recorded as the due pass, and the viewers it had passed
// before the restart stayed over the lowered cap for another interval.
func TestSweepAPassDueWhileTheGrownQueueIsBusyStartsOver(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	opts := SweepOptions{Actors: 2, RecoveryInterval: 6 * time.Hour}
	s := openSweep(t, path, followingPosts(5), opts)
	var changes []Change
	for i := range 8 {
		changes = append(changes, follow(fmt.Sprintf("v%d", i), "alice", "f", 1))
	}
	for i := range 5 {
		changes = append(changes, post("alice", fmt.Sprintf("p%d", i), int64(10+i)))
	}
	changes = append(changes, post("bob", "b1", 20))
	res := apply(t, s, changes...)
	if !settle(t, s, t0, res.MutatedFeeds()) {
		t.Fatal("no full pass ended")
	}
	// An hour later ingest slices end the lap under way (the fan-out
	// queued alice's followers, so it may have begun another), then begin
	// one more: v0..v3 visited.
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("no lap ended")
		}
		if r := tick(t, s, t0.Add(time.Hour), true); r.PassEnded {
			break
		}
	}
	for range 2 {
		if r := tick(t, s, t0.Add(time.Hour), true); r.Viewers != 2 || r.PassEnded {
			t.Fatalf("ingest tick = %+v, want two viewers visited mid-lap", r)
		}
	}
	s.Close()

	// Restarted with a lower cap: every feed is over it.
	s = openSweep(t, path, followingPosts(2), opts)
	if got := feedsOverCap(t, s); got != 8 {
		t.Fatalf("%d feeds over the lowered cap, want 8", got)
	}
	// v4..v7 follow bob: the merges queue them as grown, so the idle
	// ticks at the due time serve the grown queue first.
	changes = nil
	for i := 4; i < 8; i++ {
		changes = append(changes, follow(fmt.Sprintf("v%d", i), "bob", "fb", 30))
	}
	if res := apply(t, s, changes...); res.MergedRows != 4 {
		t.Fatalf("merged %d rows, want 4", res.MergedRows)
	}
	// The last pass ended at t0+1h.
	due := t0.Add(7 * time.Hour)
	if r := tick(t, s, due, false); r.Reason != SweepGrown {
		t.Fatalf("first tick at the due time ran %q, want a grown slice", r.Reason)
	}
	settle(t, s, due, false)
	if got := feedsOverCap(t, s); got != 0 {
		t.Fatalf("%d feeds over cap after the due pass settled on an idle stream", got)
	}
}
