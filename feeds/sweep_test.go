package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const noteNSID = syntax.NSID("com.example.note")

// t0 is the sweep tests' clock origin; ticks are driven from it, never
// from the wall clock.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// followingPosts is one feed, "following", of posts with the given cap.
func followingPosts(laneCap int) []Feed {
	return []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: laneCap}}}}
}

func openSweep(tb testing.TB, path string, feeds []Feed, opts SweepOptions) *Store {
	tb.Helper()
	return mustOpenWith(tb, Options{Path: path, Feeds: feeds, IndexAll: true, Sweep: opts})
}

// target makes a create of a record in any target collection.
func target(coll syntax.NSID, author, rkey string, n int64) Change {
	c := post(author, rkey, n)
	c.Collection = coll
	c.Record = json.RawMessage(fmt.Sprintf(`{"$type":%q,"text":%q}`, coll, rkey))
	return c
}

func tick(tb testing.TB, s *Store, now time.Time, mutated bool) SweepResult {
	tb.Helper()
	res, err := s.SweepTick(context.Background(), Tick{Now: now, Mutated: mutated})
	if err != nil {
		tb.Fatalf("sweep tick: %v", err)
	}
	if res.Viewers > s.sweep.opts.Actors {
		tb.Fatalf("slice visited %d viewers, budget %d", res.Viewers, s.sweep.opts.Actors)
	}
	return res
}

// didNothing says whether a tick did nothing: no slice, no retention,
// vacuum or backlog work, whatever it waited for the write lock.
func didNothing(r SweepResult) bool {
	r.LockWait = 0
	return r == SweepResult{}
}

// settle runs a tick, then idle ticks until nothing is pending (no grown
// feeds queued, no pass due), and reports whether a full pass ended.
func settle(tb testing.TB, s *Store, now time.Time, mutated bool) (passEnded bool) {
	tb.Helper()
	for range 1000 {
		r := tick(tb, s, now, mutated)
		mutated = false
		passEnded = passEnded || r.PassEnded
		if !r.Pending {
			return passEnded
		}
	}
	tb.Fatal("sweep still pending after 1000 ticks")
	return false
}

func querySQL[T any](tb testing.TB, s *Store, q string, args ...any) T {
	tb.Helper()
	var v T
	if err := s.writer.QueryRow(q, args...).Scan(&v); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
	return v
}

// feedsOverCap counts (viewer, lane) pairs holding more than the lane's cap.
func feedsOverCap(tb testing.TB, s *Store) int {
	return querySQL[int](tb, s, `SELECT count(*) FROM (
		SELECT 1 FROM feed_items fi JOIN feed_targets t ON t.id = fi.target_id
		GROUP BY fi.viewer_id, fi.target_id HAVING count(*) > max(t.cap))`)
}

func TestSweepHoldsEachLaneToItsCapWithTiesAtTheCutoff(t *testing.T) {
	// Two feeds over the same follow and post collections with their own
	// caps, and a second collection in one of them.
	feeds := []Feed{
		{Name: "a", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{
			{Collection: postNSID, Cap: 3}, {Collection: noteNSID, Cap: 2}}},
		{Name: "b", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{
			{Collection: postNSID, Cap: 5}}},
	}
	s := openSweep(t, t.TempDir()+"/appview.db", feeds, SweepOptions{Actors: 2})

	var changes []Change
	viewers := []string{"v1", "v2", "v3", "v4", "v5"}
	for i, v := range viewers {
		changes = append(changes, follow(v, "alice", "fa", int64(i+1)), follow(v, "bob", "fb", int64(i+1)))
	}
	apply(t, s, changes...)
	// Eight posts in one microsecond: the cutoff falls inside the tie,
	// which the record id breaks as pagination does.
	changes = nil
	for i := 1; i <= 8; i++ {
		changes = append(changes, post("alice", fmt.Sprintf("p%d", i), 100))
	}
	changes = append(changes, post("bob", "q1", 50), post("bob", "q2", 60))
	for i := 1; i <= 6; i++ {
		changes = append(changes, target(noteNSID, "alice", fmt.Sprintf("n%d", i), int64(200+i)))
	}
	res := apply(t, s, changes...)
	if got := feedsOverCap(t, s); got != 15 {
		t.Fatalf("%d lanes over cap before the sweep, want 15", got)
	}

	if !settle(t, s, t0, res.MutatedFeeds()) {
		t.Fatal("no full pass ended")
	}
	if got := feedsOverCap(t, s); got != 0 {
		t.Fatalf("%d lanes over cap after a full pass", got)
	}
	for _, v := range viewers {
		for _, c := range []struct {
			feed string
			coll syntax.NSID
			want []string
		}{
			{"a", postNSID, []string{"p8", "p7", "p6"}},
			{"a", noteNSID, []string{"n6", "n5"}},
			{"b", postNSID, []string{"p8", "p7", "p6", "p5", "p4"}},
		} {
			if got := feedRKeys(t, s, c.feed, v, c.coll); !slices.Equal(got, c.want) {
				t.Errorf("%s feed %s %s = %v, want %v", v, c.feed, c.coll, got, c.want)
			}
		}
	}
}

func TestSweepEnforcesALoweredCapOnAnIdleStreamOnceARecoveryPassIsDue(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	capped := func(n int) []Feed {
		return []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
			Targets: []Target{{Collection: postNSID, Cap: n}}}}
	}
	opts := SweepOptions{Actors: 2, RecoveryInterval: 6 * time.Hour}
	s := openSweep(t, path, capped(5), opts)
	var changes []Change
	for i := range 5 {
		changes = append(changes, follow(fmt.Sprintf("v%d", i), "alice", "f", int64(i+1)))
	}
	for i := range 5 {
		changes = append(changes, post("alice", fmt.Sprintf("p%d", i), int64(100+i)))
	}
	res := apply(t, s, changes...)
	settle(t, s, t0, res.MutatedFeeds())
	if got := len(feedRKeys(t, s, "following", "v0", postNSID)); got != 5 {
		t.Fatalf("feed holds %d, want 5", got)
	}
	s.Close()

	s = openSweep(t, path, capped(2), opts)
	// Not due yet: the stream is idle and the last pass ended at t0.
	for _, after := range []time.Duration{time.Minute, 5*time.Hour + 59*time.Minute} {
		if r := tick(t, s, t0.Add(after), false); r.Reason != "" || r.Pending {
			t.Fatalf("tick at +%v ran %+v before the recovery pass was due", after, r)
		}
	}
	if got := feedsOverCap(t, s); got != 5 {
		t.Fatalf("%d feeds over the lowered cap, want 5 untouched", got)
	}
	due := t0.Add(6 * time.Hour)
	ticks := 0
	for {
		r := tick(t, s, due, false)
		ticks++
		if r.Reason != SweepRecovery {
			t.Fatalf("tick %d ran %q, want a recovery slice", ticks, r.Reason)
		}
		if r.PassEnded {
			break
		}
	}
	// Five viewers at two per slice: ceil(5/2) slices.
	if ticks != 3 {
		t.Errorf("recovery pass took %d ticks, want 3", ticks)
	}
	if got := feedsOverCap(t, s); got != 0 {
		t.Fatalf("%d feeds over cap after the recovery pass", got)
	}
	if got := feedRKeys(t, s, "following", "v3", postNSID); !slices.Equal(got, []string{"p4", "p3"}) {
		t.Fatalf("feed = %v, want the two newest", got)
	}
	if r := tick(t, s, due.Add(time.Minute), false); r.Reason != "" {
		t.Fatalf("a tick after the pass ran a %q slice", r.Reason)
	}
}

func TestSweepIdleTickWithNoPassDueIssuesNoDelete(t *testing.T) {
	s := openSweep(t, t.TempDir()+"/appview.db", defaultFeeds, SweepOptions{Actors: 10})
	res := apply(t, s, follow("v", "alice", "f", 1), post("alice", "p", 2), unpost("alice", "gone", 3))
	settle(t, s, t0, res.MutatedFeeds())

	changes := querySQL[int64](t, s, `SELECT total_changes()`)
	for i := range 10 {
		r := tick(t, s, t0.Add(time.Duration(i)*time.Minute), false)
		if !didNothing(r) {
			t.Fatalf("idle tick %d did %+v", i, r)
		}
	}
	if got := querySQL[int64](t, s, `SELECT total_changes()`); got != changes {
		t.Fatalf("idle ticks changed %d rows", got-changes)
	}
	// A batch that wrote no feed rows is idle too.
	res = apply(t, s, follow("w", "nobody", "f", 4))
	if res.MutatedFeeds() {
		t.Fatal("a follow of an account with no records mutated feeds")
	}
}

// lastViewerFollowsBob opens a store whose one lane has the given cap,
// where n viewers follow alice and are swept to rest at cap; then the
// last of them, the one the rolling cursor reaches last, follows bob,
// whose three posts the merge brings in past the cap and queues the
// viewer as grown. It returns that viewer and the follow's batch.
func lastViewerFollowsBob(t *testing.T, n, laneCap int, opts SweepOptions) (*Store, string, BatchResult) {
	t.Helper()
	s := openSweep(t, t.TempDir()+"/appview.db", followingPosts(laneCap), opts)
	var changes []Change
	for i := range n {
		changes = append(changes, follow(fmt.Sprintf("v%02d", i), "alice", "f", 1))
	}
	for i := range laneCap {
		changes = append(changes, post("alice", fmt.Sprintf("p%d", i), int64(10+i)))
	}
	apply(t, s, changes...)
	settle(t, s, t0, false)
	apply(t, s, post("bob", "b1", 20), post("bob", "b2", 21), post("bob", "b3", 22))
	last := fmt.Sprintf("v%02d", n-1)
	res := apply(t, s, follow(last, "bob", "fb", 30))
	if res.MergedRows != 3 {
		t.Fatalf("merged %d rows, want 3", res.MergedRows)
	}
	if q := querySQL[int](t, s, `SELECT count(*) FROM sweep_grown`); q != 1 {
		t.Fatalf("%d grown entries queued, want the merged viewer", q)
	}
	return s, last, res
}

func TestSweepFollowMergeQueuesTheViewer(t *testing.T) {
	s, last, res := lastViewerFollowsBob(t, 10, 2, SweepOptions{Actors: 2})
	r := tick(t, s, t0, res.MutatedFeeds())
	if r.GrownViewers != 1 || r.Pending {
		t.Fatalf("tick = %+v, want the one grown viewer served and nothing pending", r)
	}
	if got := feedRKeys(t, s, "following", last, postNSID); !slices.Equal(got, []string{"b3", "b2"}) {
		t.Fatalf("feed = %v after one tick, want it back at cap", got)
	}
}

func TestSweepGrownQueueOverflowFallsBackToTheRollingCursor(t *testing.T) {
	feeds := followingPosts(1)
	reg := prometheus.NewRegistry()
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: feeds, IndexAll: true,
		Metrics: NewMetrics(reg), Sweep: SweepOptions{Actors: 4, GrownLimit: 2}})
	var changes []Change
	for i := range 6 {
		changes = append(changes, follow(fmt.Sprintf("v%d", i), fmt.Sprintf("a%d", i%3), "f", 1))
	}
	apply(t, s, changes...)
	settle(t, s, t0, false)
	// Three authors post twice: three grown entries, room for two.
	res := apply(t, s, post("a0", "p1", 10), post("a1", "p1", 10), post("a2", "p1", 10),
		post("a0", "p2", 11), post("a1", "p2", 11), post("a2", "p2", 11))
	if got := querySQL[int](t, s, `SELECT count(*) FROM sweep_grown`); got != 2 {
		t.Fatalf("grown queue holds %d, want its bound 2", got)
	}
	if got := testutil.ToFloat64(s.metrics.sweep.grownDropped); got != 1 {
		t.Fatalf("dropped %v grown entries, want 1", got)
	}
	settle(t, s, t0, res.MutatedFeeds())
	if got := feedsOverCap(t, s); got != 0 {
		t.Fatalf("%d feeds over cap after a full pass", got)
	}
}

func TestSweepClearsLanesThatLeftTheConfig(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	both := []Feed{
		{Name: "a", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 5}}},
		{Name: "b", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 5}}},
	}
	s := openSweep(t, path, both, SweepOptions{})
	apply(t, s, follow("v", "alice", "f", 1), post("alice", "p", 2))
	s.Close()
	s = openSweep(t, path, both[:1], SweepOptions{})
	settle(t, s, t0, false)
	if got := querySQL[int](t, s, `SELECT count(*) FROM feed_items fi JOIN feed_targets t ON t.id = fi.target_id WHERE t.feed = 'b'`); got != 0 {
		t.Fatalf("disabled lane still holds %d rows", got)
	}
	if got := feedRKeys(t, s, "a", "v", postNSID); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("feed a = %v", got)
	}
}

func TestSweepMetrics(t *testing.T) {
	feeds := followingPosts(1)
	reg := prometheus.NewRegistry()
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: feeds, IndexAll: true,
		Metrics: NewMetrics(reg), Sweep: SweepOptions{Actors: 10}})
	res := apply(t, s, follow("v1", "alice", "f", 1), follow("v2", "alice", "f", 1),
		post("alice", "p1", 2), post("alice", "p2", 3))
	r := tick(t, s, t0, res.MutatedFeeds())
	m := s.metrics.sweep
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"ingest slices", testutil.ToFloat64(m.slices.WithLabelValues("ingest")), 1},
		{"viewers visited", testutil.ToFloat64(m.viewers), float64(r.Viewers)},
		{"rows deleted", testutil.ToFloat64(m.rows), 2},
		{"last pass end", testutil.ToFloat64(m.lastPassEnd), float64(t0.Unix())},
		{"last pass rows", testutil.ToFloat64(m.lastPassRows), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "appview_sweep_slice_seconds"); n != 1 {
		t.Errorf("slice histogram series = %d", n)
	}
	var nilMetrics *Metrics
	nilMetrics.observeSlice(SweepIngest, 1, 1, time.Second)
	nilMetrics.observePass(sweepState{lastPassEndUS: 1})
	nilMetrics.observeRetention(1, 1, 1)
}

func TestSweepTrimsADeploymentSmallerThanTheBudgetInOneTick(t *testing.T) {
	feeds := followingPosts(1)
	s := openSweep(t, t.TempDir()+"/appview.db", feeds, SweepOptions{Actors: 4})
	apply(t, s, follow("v1", "alice", "f", 1), follow("v2", "alice", "f", 1), follow("v3", "alice", "f", 1))
	settle(t, s, t0, false)
	for i := range 3 {
		res := apply(t, s, post("alice", fmt.Sprintf("p%d", i), int64(10+2*i)), post("alice", fmt.Sprintf("q%d", i), int64(11+2*i)))
		// The grown queue takes two of the three viewers, the rolling
		// cursor the third, passing over the two already trimmed.
		r := tick(t, s, t0, res.MutatedFeeds())
		if got := feedsOverCap(t, s); got != 0 || !r.PassEnded || r.Viewers != 3 {
			t.Fatalf("tick %d: %+v, %d feeds over cap; want all three trimmed in one pass", i, r, got)
		}
	}
}

// TestSweepGrownAuthorPostingAgainGoesRoundAgain: followers an entry has
// already passed grew again when the author posts mid-expansion, so the
// entry goes round once more instead of ending.
func TestSweepGrownAuthorPostingAgainGoesRoundAgain(t *testing.T) {
	feeds := followingPosts(1)
	s := openSweep(t, t.TempDir()+"/appview.db", feeds, SweepOptions{Actors: 2})
	apply(t, s, follow("v1", "alice", "f", 1), follow("v2", "alice", "f", 1), follow("v3", "alice", "f", 1))
	settle(t, s, t0, false)
	entry := func() (after int64, again bool) {
		if err := s.writer.QueryRow(`SELECT after_id, again FROM sweep_grown`).Scan(&after, &again); err != nil {
			t.Fatal(err)
		}
		return after, again
	}
	res := apply(t, s, post("alice", "p1", 10), post("alice", "p2", 11))
	tick(t, s, t0, res.MutatedFeeds()) // one follower (budget 1)
	if after, again := entry(); after == 0 || again {
		t.Fatalf("entry after one slice: after %d again %v", after, again)
	}
	res = apply(t, s, post("alice", "p3", 12))
	if _, again := entry(); !again {
		t.Fatal("a post mid-expansion did not mark the entry to go round again")
	}
	tick(t, s, t0, res.MutatedFeeds()) // the second follower
	tick(t, s, t0, false)              // the third
	tick(t, s, t0, false)              // end of the round: requeued, first follower again
	if after, again := entry(); after != querySQL[int64](t, s, `SELECT id FROM actors WHERE did = ?`, string(did("v1"))) || again {
		t.Fatalf("entry after its round: after %d again %v; want a second round begun", after, again)
	}
	settle(t, s, t0, false)
	if n := querySQL[int](t, s, `SELECT count(*) FROM sweep_grown`); n != 0 || feedsOverCap(t, s) != 0 {
		t.Fatalf("%d entries left, %d feeds over cap", n, feedsOverCap(t, s))
	}
}

// twelveFollowersOfAlice opens a store whose one lane has the given cap,
// a slice budget of 2 and a grown queue of 1 (so the rolling cursor does
// the work), with twelve viewers following alice, swept to rest.
func twelveFollowersOfAlice(t *testing.T, laneCap int) *Store {
	t.Helper()
	feeds := followingPosts(laneCap)
	s := openSweep(t, t.TempDir()+"/appview.db", feeds, SweepOptions{Actors: 2, GrownLimit: 1})
	var follows []Change
	for i := range 12 {
		follows = append(follows, follow(fmt.Sprintf("v%02d", i), "alice", "f", 1))
	}
	apply(t, s, follows...)
	settle(t, s, t0, false)
	return s
}

// A catch-up batch of k ordinary batches' worth of events runs one slice
// of k budgets: the sweep's pace per event does not depend on batching.
func TestSweepCatchUpTickVisitsItsShareOfBudgets(t *testing.T) {
	s := twelveFollowersOfAlice(t, 1)
	res := apply(t, s, post("alice", "p1", 10), post("alice", "p2", 11))

	r, err := s.SweepTick(context.Background(), Tick{Now: t0, Mutated: res.MutatedFeeds(), Events: 3 * DefaultBatchEvents})
	if err != nil {
		t.Fatal(err)
	}
	if r.Viewers != 6 {
		t.Fatalf("three batches' worth of events with a budget of 2 visited %d viewers, want 6", r.Viewers)
	}
	if r.RowsDeleted != 6 {
		t.Fatalf("deleted %d rows, want one from each of the 6 viewers visited", r.RowsDeleted)
	}
	if got := feedsOverCap(t, s); got != 6 {
		t.Fatalf("%d feeds over cap, want the 6 not yet visited", got)
	}
	// A slice is bounded, so a huge batch is one long slice, not a stall.
	sw := &s.sweep
	bound := 2 * maxSliceScale
	if got := sw.sliceVisits(Tick{Events: 1 << 30}); got != bound {
		t.Fatalf("visits of a huge batch %d, want the bound %d", got, bound)
	}
	if got := sw.sliceVisits(Tick{Rows: 1 << 40}); got != bound {
		t.Fatalf("visits of a huge fan-out %d, want the bound %d", got, bound)
	}
	if got := sw.sliceVisits(Tick{}); got != 2 {
		t.Fatalf("visits of a tick with no event count %d, want one budget, 2", got)
	}
}

// A live batch carries what batch_interval gathered, often a small part
// of batch_size: its slice visits that part of a budget, or of the row
// pace if that is more, and the fraction of a visit left over is carried,
// so the pace per event is the catch-up pace. (It was a whole budget a
// batch: ten times the pace for batches of a tenth.)
func TestSweepLiveTicksVisitTheirShareOfABudget(t *testing.T) {
	// Cap 40: one visit per 10 rows; 4 visits per 10 events.
	s := openSweep(t, t.TempDir()+"/appview.db", followingPosts(40), SweepOptions{Actors: 4, BatchEvents: 10})
	var follows []Change
	for i := range 12 {
		follows = append(follows, follow(fmt.Sprintf("v%02d", i), "alice", "f", 1))
	}
	apply(t, s, append(follows, post("alice", "p0", 2))...) // the sweep visits viewers with feed rows
	settle(t, s, t0, false)
	sweep := func(events int, rows int64) SweepResult {
		t.Helper()
		r, err := s.SweepTick(context.Background(), Tick{Now: t0, Mutated: true, Events: events, Rows: rows})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Batches of 3 events and few rows: 1.2 visits a batch, so five
	// batches visit 1, 1, 1, 1, 2 viewers (6 in all, the pace of 15 events).
	var visits []int
	for range 5 {
		visits = append(visits, sweep(3, 1).Viewers)
	}
	if want := []int{1, 1, 1, 1, 2}; !slices.Equal(visits, want) {
		t.Fatalf("live slices visited %v viewers, want %v", visits, want)
	}

	// A batch of one event that wrote 5 rows is owed 0.4 of a visit by its
	// events and 0.5 by its rows: no slice at all, and no write, until a
	// second such batch makes the visit whole.
	before := querySQL[int](t, s, `SELECT total_changes()`)
	if r := sweep(1, 5); r.Reason != "" || r.Viewers != 0 {
		t.Fatalf("a tick owed less than a visit ran a %q slice of %d viewers", r.Reason, r.Viewers)
	}
	if after := querySQL[int](t, s, `SELECT total_changes()`); after != before {
		t.Fatalf("a tick owed less than a visit wrote %d rows", after-before)
	}
	if r := sweep(1, 5); r.Reason != SweepIngest || r.Viewers != 1 {
		t.Fatalf("the tick that completed a visit ran a %q slice of %d viewers, want ingest and 1", r.Reason, r.Viewers)
	}
}

// A slice that fails (here its context ended; in the daemon, another
// process's write lock held past the busy timeout) rolled back, so its
// visits were never made. They used to be charged anyway: a live stream's
// next tick, owed a fraction of a visit, ran none, and those feeds stayed
// over cap until the next lap (a review suspected it). The next tick now
// makes them.
func TestSweepAFailedSliceGivesItsVisitsToTheNextTick(t *testing.T) {
	// Cap 40: one visit per 10 rows; 4 visits per 10 events.
	s := openSweep(t, t.TempDir()+"/appview.db", followingPosts(40), SweepOptions{Actors: 4, BatchEvents: 10})
	var follows []Change
	for i := range 12 {
		follows = append(follows, follow(fmt.Sprintf("v%02d", i), "alice", "f", 1))
	}
	apply(t, s, append(follows, post("alice", "p0", 2))...)
	settle(t, s, t0, false)

	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.SweepTick(stopped, Tick{Now: t0, Mutated: true, Events: 10, Rows: 1}); err == nil {
		t.Fatal("a slice with its context ended did not fail")
	}
	// 4 visits given back, and 1.2 of this batch's own.
	r, err := s.SweepTick(context.Background(), Tick{Now: t0, Mutated: true, Events: 3, Rows: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Viewers != 5 {
		t.Fatalf("the tick after a failed slice visited %d viewers, want 5 (the failed slice's 4 and its own 1)", r.Viewers)
	}
}

// Slices of one visit, a slow stream's, give it to the grown queue and
// the rolling cursor in turn: a grown feed is trimmed within two ticks,
// not left for the rolling cursor's lap (40 ticks here) or an idle tick
// that a steady stream never lets come (a review found it).
func TestSweepOneVisitSlicesStillServeTheGrownQueue(t *testing.T) {
	s, _, _ := lastViewerFollowsBob(t, 40, 1, SweepOptions{Actors: 4, BatchEvents: 10})
	grown := 0
	for range 2 {
		r, err := s.SweepTick(context.Background(), Tick{Now: t0, Mutated: true, Events: 3, Rows: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.Viewers != 1 {
			t.Fatalf("slice of %d visits, want 1", r.Viewers)
		}
		grown += r.GrownViewers
	}
	if n, over := querySQL[int](t, s, `SELECT count(*) FROM sweep_grown`), feedsOverCap(t, s); grown != 1 || n != 0 || over != 0 {
		t.Fatalf("two one-visit slices trimmed %d grown viewers; %d entries left, %d feeds over cap; want 1, 0, 0", grown, n, over)
	}
}

// Where one event reaches many viewers, the per-event pace falls behind
// the rows written; a slice then visits one viewer per rowsPerVisit rows
// (a quarter of the smallest cap), so feeds stay near their caps.
func TestSweepPaceFollowsTheRowsWritten(t *testing.T) {
	run := func(rowPace bool) (SweepResult, int) {
		s := twelveFollowersOfAlice(t, 8)
		var posts []Change
		for i := range 10 {
			posts = append(posts, post("alice", fmt.Sprintf("p%d", i), int64(10+i)))
		}
		res := apply(t, s, posts...) // 10 rows to each of 12 viewers: 120 rows, 2 over cap each
		if res.FanoutRows != 120 {
			t.Fatalf("fan-out wrote %d rows, want 120", res.FanoutRows)
		}
		if got := s.sweep.rowsPerVisit; got != 2 {
			t.Fatalf("rows per visit %d, want a quarter of the cap 8", got)
		}
		tk := Tick{Now: t0, Mutated: true}
		if rowPace {
			tk.Rows = res.FanoutRows
		}
		r, err := s.SweepTick(context.Background(), tk)
		if err != nil {
			t.Fatal(err)
		}
		return r, feedsOverCap(t, s)
	}
	// 120 rows at 2 rows a visit ask for 60 visits, which cover all 12
	// viewers in this one slice.
	r, over := run(true)
	if over != 0 || r.Viewers != 12 || r.RowsDeleted != 24 {
		t.Fatalf("row-paced slice: visited %d, deleted %d, %d feeds over cap; want 12, 24, 0", r.Viewers, r.RowsDeleted, over)
	}
	// Paced per event only, the same batch gets one budget of 2 viewers.
	if r, over := run(false); r.Viewers != 2 || over != 10 {
		t.Fatalf("event-paced slice: visited %d with %d feeds over cap; want 2 and 10", r.Viewers, over)
	}
}

// A viewer who follows two authors queued in the same slice is trimmed
// once: the second author's expansion passes over it, and the rolling
// cursor does not come back to it either.
func TestSweepGrownFollowerOfTwoAuthorsIsTrimmedOnce(t *testing.T) {
	feeds := followingPosts(1)
	s := openSweep(t, t.TempDir()+"/appview.db", feeds, SweepOptions{Actors: 12})
	var follows []Change
	for i := range 3 {
		v := fmt.Sprintf("v%d", i)
		follows = append(follows, follow(v, "alice", "fa", 1), follow(v, "bob", "fb", 1))
	}
	apply(t, s, follows...)
	settle(t, s, t0, false)
	res := apply(t, s, post("alice", "a1", 10), post("alice", "a2", 11), post("bob", "b1", 12))
	r := tick(t, s, t0, res.MutatedFeeds())
	if r.GrownViewers != 3 || r.Viewers != 3 {
		t.Fatalf("slice visited %d viewers, %d from the grown queue; want each of the 3 followers once", r.Viewers, r.GrownViewers)
	}
	if r.RowsDeleted != 6 || feedsOverCap(t, s) != 0 {
		t.Fatalf("deleted %d rows, %d feeds over cap; want 6 and 0", r.RowsDeleted, feedsOverCap(t, s))
	}
}

// The viewers the grown queue passes over as already trimmed do not use up
// the rolling cursor's share: a slice whose budget covers every viewer
// still trims them all and ends the pass.
func TestSweepGrownDuplicatesLeaveTheRollingBudget(t *testing.T) {
	feeds := followingPosts(1)
	s := openSweep(t, t.TempDir()+"/appview.db", feeds, SweepOptions{Actors: 12, GrownLimit: 2})
	var follows []Change
	for i := range 3 {
		v := fmt.Sprintf("v%02d", i)
		follows = append(follows, follow(v, "alice", "fa", 1), follow(v, "bob", "fb", 1))
	}
	for i := range 11 {
		follows = append(follows, follow(fmt.Sprintf("v%02d", i), "carol", "fc", 1))
	}
	apply(t, s, follows...)
	settle(t, s, t0, false)
	// alice's and bob's entries fill the queue; carol's is dropped and
	// left to the rolling cursor.
	res := apply(t, s, post("alice", "a1", 10), post("bob", "b1", 11), post("carol", "c1", 12), post("carol", "c2", 13))
	r := tick(t, s, t0, res.MutatedFeeds())
	if over := feedsOverCap(t, s); over != 0 || r.Viewers != 11 || !r.PassEnded {
		t.Fatalf("slice visited %d viewers (%d grown), pass ended %v, %d feeds over cap; want all 11 trimmed and the pass ended",
			r.Viewers, r.GrownViewers, r.PassEnded, over)
	}
}

// Outside index_all mode the fan-out's grown authors are known without a
// query (growFanoutAuthors): every stored post's author is followed by a
// viewer. A post queues its author once; a replayed post, which fans out
// nothing, queues nothing; and the entry trims the followers to cap.
func TestSweepGrownAuthorsOutsideIndexAll(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: followingPosts(1), Sweep: SweepOptions{Actors: 2}})
	ctx := context.Background()
	for _, v := range []string{"v1", "v2", "v3"} {
		if _, err := s.RegisterViewer(ctx, did(v), "following", t0); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, s, follow("v1", "alice", "f", 1), follow("v2", "alice", "f", 1), follow("v3", "alice", "f", 1))
	settle(t, s, t0, false)
	grown := func() (entries int, author string) {
		entries = querySQL[int](t, s, `SELECT count(*) FROM sweep_grown`)
		if entries == 1 {
			author = querySQL[string](t, s, `SELECT a.did FROM sweep_grown g JOIN actors a ON a.id = g.author_id`)
		}
		return entries, author
	}

	res := apply(t, s, post("alice", "p1", 10), post("alice", "p2", 11), post("nobody", "p1", 12))
	if res.FanoutRows != 6 || res.OutOfScope != 1 {
		t.Fatalf("fan-out %d rows, %d out of scope; want 6 and 1", res.FanoutRows, res.OutOfScope)
	}
	if n, author := grown(); n != 1 || author != string(did("alice")) {
		t.Fatalf("grown queue: %d entries (author %q); want one, alice", n, author)
	}
	settle(t, s, t0, res.MutatedFeeds())
	if n, _ := grown(); n != 0 || feedsOverCap(t, s) != 0 {
		t.Fatalf("after the sweep: %d grown entries, %d feeds over cap", n, feedsOverCap(t, s))
	}

	res = apply(t, s, post("alice", "p2", 11)) // a replay: stored already
	if res.FanoutRows != 0 {
		t.Fatalf("a replayed post fanned out %d rows", res.FanoutRows)
	}
	if n, _ := grown(); n != 0 {
		t.Fatalf("a replayed post queued %d grown entries", n)
	}
}

// Another process (an operator's `appview backfill`, whose follow merges
// queue the viewers they grow) writes to the grown queue, which the
// daemon's sweep only knew of from its own commits. On an idle stream no
// slice ran for it until the next due pass, so the grown feeds stayed
// over cap for up to a recovery interval (a review suspected it). An idle
// tick that notices another process's commit now reads the queue again.
func TestSweepAnIdleTickServesGrownFeedsAnotherProcessQueued(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	opts := SweepOptions{Actors: 2}
	daemon := openSweep(t, path, followingPosts(2), opts)
	var changes []Change
	for i := range 4 {
		changes = append(changes, follow(fmt.Sprintf("v%d", i), "alice", "f", 1))
	}
	changes = append(changes, post("alice", "p0", 10), post("alice", "p1", 11),
		post("bob", "b1", 20), post("bob", "b2", 21), post("bob", "b3", 22))
	apply(t, daemon, changes...)
	settle(t, daemon, t0, false)
	if r := tick(t, daemon, t0, false); !didNothing(r) {
		t.Fatalf("a settled sweep's idle tick did %+v", r)
	}

	other := openSweep(t, path, followingPosts(2), opts)
	if res := apply(t, other, follow("v3", "bob", "fb", 30)); res.MergedRows != 3 {
		t.Fatalf("the other process merged %d rows, want 3", res.MergedRows)
	}
	if q := querySQL[int](t, daemon, `SELECT count(*) FROM sweep_grown`); q != 1 {
		t.Fatalf("%d grown entries queued, want the merged viewer", q)
	}

	r := tick(t, daemon, t0, false)
	if r.Reason != SweepGrown || r.GrownViewers != 1 {
		t.Fatalf("the idle tick after another process queued a grown feed did %+v, want it served", r)
	}
	if got := feedRKeys(t, daemon, "following", "v3", postNSID); !slices.Equal(got, []string{"b3", "b2"}) {
		t.Fatalf("feed = %v, want it back at cap", got)
	}
}

// A one-visit slice that fails after its transaction began (a statement
// failing mid-slice: notifyOfUpdate's deadline, a full disk; here a
// trigger) rolled back, and its turn of the odd visit with it. The turn
// used to pass anyway: the grown queue lost the visit it was owed, and
// the next committed slice gave the odd visit to the rolling cursor
// again, so a grown feed waited past two slices, as if the failed one
// had served it.
func TestSweepAFailedSliceKeepsTheOddVisitsTurn(t *testing.T) {
	s, _, _ := lastViewerFollowsBob(t, 40, 1, SweepOptions{Actors: 4, BatchEvents: 10})
	sweep := func(events int) (SweepResult, error) {
		return s.SweepTick(context.Background(), Tick{Now: t0, Mutated: true, Events: events})
	}
	// 1.2 visits owed: one slice of one visit, the rolling cursor's turn.
	first, err := sweep(3)
	if err != nil {
		t.Fatal(err)
	}
	if first.Viewers != 1 || first.GrownViewers != 0 {
		t.Fatalf("first slice = %+v, want one visit by the rolling cursor", first)
	}
	// The next, the grown queue's turn, fails as it stores its cursor.
	exec := func(q string) {
		t.Helper()
		if _, err := s.writer.ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE TRIGGER fail_sweep BEFORE UPDATE ON sweep_state BEGIN SELECT RAISE(ABORT, 'injected'); END`)
	if _, err := sweep(3); err == nil {
		t.Fatal("the slice did not fail")
	}
	exec(`DROP TRIGGER fail_sweep`)
	// Its visit given back (1.4 owed) and 0.4 of this batch's: 1.8, one
	// visit, still the grown queue's turn.
	second, err := sweep(1)
	if err != nil {
		t.Fatal(err)
	}
	if second.Viewers != 1 || second.GrownViewers != 1 {
		t.Fatalf("slice after the failed one = %+v, want its one visit for the grown queue", second)
	}
	if n, over := querySQL[int](t, s, `SELECT count(*) FROM sweep_grown`), feedsOverCap(t, s); n != 0 || over != 0 {
		t.Fatalf("%d grown entries left, %d feeds over cap after two committed slices; want 0, 0", n, over)
	}
}

// A vacuum's freed pages are the difference of two freelist reads with no
// transaction around them, so another process's commit in between can
// make it negative; the counter's Add of that panicked, stopping the
// daemon (a review).
func TestANegativeVacuumCountDoesNotPanic(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.observeVacuum(5)
	m.observeVacuum(-3)
	if got := testutil.ToFloat64(m.sweep.vacuumedPages); got != 5 {
		t.Errorf("vacuumed pages = %v, want 5", got)
	}
}
