package appview

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
)

// Urgent writes that come back to back (new viewers' registrations in a
// loop) do not cut a catch-up down to a change a commit: a part stops for
// them at once only freeStops times a second, then once it has run
// minStopTime (stopAfterProgress; here each change takes 100 µs of the
// test's clock, so such a stop comes after 100 changes at the soonest).
// Every commit but the free stops' and the last applies at least that
// many; the cursor moves at least every third commit (free stops aside)
// although parts keep stopping before their end (carried), and never
// past an event not yet applied.
func TestUrgentWritesInALoopLeaveACatchUpItsProgressAndItsCursor(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 3000
	const perChange = 100 * time.Microsecond
	minApplied := int(minStopTime / perChange)
	clock := time.Now()
	in := &ingester{store: store, batchSize: 10, catchupSize: 100000, partSize: 3 * minApplied, partTime: time.Hour,
		batchInterval: time.Minute, now: func() time.Time { return clock }}
	in.partStop = func() bool {
		clock = clock.Add(perChange) // asked before each change but a part's first
		return store.WriterWanted()
	}
	registerBatchCuts(prometheus.NewRegistry(), in)

	ctx, stopWriters := context.WithCancel(context.Background())
	var registered int
	var writers sync.WaitGroup
	writers.Add(1)
	go func() {
		defer writers.Done()
		for ; ctx.Err() == nil; registered++ {
			did := syntax.DID(fmt.Sprintf("did:plc:loopviewer%014d", registered))
			if _, err := store.RegisterViewer(feeds.Urgent(ctx), did, "following", time.Now()); err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
		}
	}()

	var cursors []int64
	applied := runBacklog(t, in, queuedPosts(backlog, shortPost), backlog, func(int) {
		cursors = append(cursors, store.Cursor().TimeUS)
	})
	stopWriters()
	writers.Wait()

	if testutil.ToFloat64(in.cutForWriters) == 0 || registered == 0 {
		t.Fatalf("no batch was cut (%v) or no viewer registered (%d): the writers did not run alongside the catch-up",
			testutil.ToFloat64(in.cutForWriters), registered)
	}
	if max := backlog/minApplied + 2 + freeStops; len(applied) > max {
		t.Errorf("%d commits for %d events, want at most %d: %v", len(applied), backlog, max, applied)
	}
	short := 0
	for _, n := range applied[:len(applied)-1] {
		if n < minApplied {
			short++
		}
	}
	if short > freeStops {
		t.Errorf("%d commits applied fewer than %d changes, want at most %d, the free stops of the test clock's one second (applied %v)",
			short, minApplied, freeStops, applied)
	}
	// The events are applied in their order, so a commit that brings the
	// total to n has applied t0 … t0+n-1: a cursor past that would skip
	// events on a restart (a crash right after this commit).
	for i, done := 0, 0; i < len(cursors); i++ {
		if done += applied[i]; cursors[i] > t0+int64(done)-1 {
			t.Errorf("commit %d stored cursor %d past the last event it applied, %d (applied %v)", i, cursors[i], t0+int64(done)-1, applied)
		}
	}
	still := 0
	for i := 1; i < len(cursors); i++ {
		if cursors[i] > cursors[i-1] {
			still = 0
			continue
		}
		if still++; still > 2+short { // a free stop moves the cursor no more than a change does
			t.Errorf("the cursor stayed at %d for commits %d to %d (cursors %v, applied %v)", cursors[i], i-still, i, cursors, applied)
			break
		}
	}
	if got, want := store.Cursor().TimeUS, t0+backlog-1; got != want {
		t.Errorf("cursor at %d, want the last event's %d", got, want)
	}
}

// A part stopped before the rest of an earlier stopped part is applied
// stores no cursor: the rest lies at or before the cursor carried from
// that stop. The first stop after the rest is applied stores it, though
// its own part is cut short too.
func TestAStoppedPartStoresTheCarriedCursorOnceItsRestIsApplied(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 400
	clock := time.Now()
	in := &ingester{store: store, batchSize: 10, catchupSize: 1000, partSize: 100, partTime: time.Hour,
		batchInterval: time.Minute, now: func() time.Time { return clock }}
	registerBatchCuts(prometheus.NewRegistry(), in)
	asked := 0
	in.partStop = func() bool {
		// Parts of 100 events. The first stops at its 51st change (rest:
		// events 50-99, carried cursor 99); the second, events 50-149, at
		// its 21st (rest: 70-149, still holding events at or before 99);
		// the third, events 70-169, at its 41st (rest: 110-169).
		switch asked++; asked {
		case 50, 50 + 20, 50 + 20 + 40:
			clock = clock.Add(minStopTime) // each stopped part has run its time, free stop or not
			return true
		}
		return false
	}
	var cursors []int64
	applied := runBacklog(t, in, queuedPosts(backlog, shortPost), backlog, func(int) {
		cursors = append(cursors, store.Cursor().TimeUS)
	})
	if want := []int{50, 20, 40, 290}; fmt.Sprint(applied) != fmt.Sprint(want) {
		t.Fatalf("batches applied %v, want %v", applied, want)
	}
	if want := []int64{0, 0, t0 + 99, t0 + backlog - 1}; fmt.Sprint(cursors) != fmt.Sprint(want) {
		t.Errorf("cursors at the commits %v, want %v", cursors, want)
	}
	if got := testutil.ToFloat64(in.cutForWriters); got != 3 {
		t.Errorf("appview_ingest_batches_cut_total = %v, want 3", got)
	}
}

// A cursor may pass a batch's rest only when nothing in it is at or before
// the cursor: no change, no account event, and no identity event (which
// the batch keeps no time for).
func TestHeldAtOrBefore(t *testing.T) {
	for _, c := range []struct {
		name  string
		batch feeds.Batch
		want  bool
	}{
		{"empty", feeds.Batch{}, false},
		{"changes after", feeds.Batch{Changes: []feeds.Change{{TimeUS: 11}, {TimeUS: 12}}}, false},
		{"a change at", feeds.Batch{Changes: []feeds.Change{{TimeUS: 12}, {TimeUS: 10}}}, true},
		{"an account event before", feeds.Batch{Changes: []feeds.Change{{TimeUS: 11}}, Accounts: []feeds.AccountStatus{{TimeUS: 9}}}, true},
		{"an account event after", feeds.Batch{Accounts: []feeds.AccountStatus{{TimeUS: 11}}}, false},
		{"an identity event", feeds.Batch{Identities: []syntax.DID{"did:plc:bob234567abcdefghijklmno"}}, true},
	} {
		if got := heldAtOrBefore(&c.batch, 10); got != c.want {
			t.Errorf("%s: heldAtOrBefore(10) = %v, want %v", c.name, got, c.want)
		}
	}
}

// A part stops at the change in hand for the first freeStops urgent
// writers within a second; beyond that only once it has run minStopTime,
// and a second after the oldest of those stops, at once again.
func TestAPartStopsAtOnceOnlyAFewTimesASecond(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	in := &ingester{now: func() time.Time { return clock }}
	registerBatchCuts(prometheus.NewRegistry(), in)
	wanted := true
	want := func() bool { return wanted }

	ask := func(started time.Time) bool { return in.stopAfterProgress(want, started)() }
	for i := range freeStops {
		if !ask(clock) {
			t.Fatalf("stop %d of the first second did not come at once", i+1)
		}
		clock = clock.Add(time.Millisecond)
	}
	started := clock
	if ask(started) {
		t.Fatalf("stop %d within a second came at once, want it to wait minStopTime", freeStops+1)
	}
	clock = started.Add(minStopTime - time.Microsecond)
	if ask(started) {
		t.Fatal("a part that has not run minStopTime stopped")
	}
	clock = started.Add(minStopTime)
	if !ask(started) {
		t.Fatal("a part that has run minStopTime did not stop")
	}
	if atOnce, after := testutil.ToFloat64(in.stopsAtOnce), testutil.ToFloat64(in.stopsAfterMinimum); atOnce != freeStops || after != 1 {
		t.Errorf("stops counted %v at once and %v after the minimum, want %d and 1", atOnce, after, freeStops)
	}
	wanted = false
	clock = clock.Add(time.Hour)
	if ask(clock.Add(-time.Hour)) {
		t.Fatal("a part stopped with no urgent writer waiting")
	}
	// The oldest of the last freeStops stops is the second one, at 1 ms;
	// a second after it a stop is free again.
	wanted = true
	clock = time.Unix(1_700_000_000, 0).Add(time.Millisecond + time.Second)
	if !ask(clock) {
		t.Fatal("a second after the oldest of the last stops, a stop did not come at once")
	}
}

// A cut whose commit finds that an operator reset the stream cursor
// (another process, between the cut's parts) adopts the reset position
// instead of storing its own, asks the consumer to reconnect, and drops
// the rest of its batch: those events came from before the reset, as the
// queued ones did, and the replay from the reset position brings them
// again. Nothing of the rest is written, and no commit after the cut
// stores a cursor past the reset position.
func TestACutThatFindsTheCursorResetDropsItsRest(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	store := openIndexAllStoreAt(t, path)
	tool := openIndexAllStoreAt(t, path)
	const backlog = 200
	// A stored cursor to reset: the operator's command needs one.
	if _, err := store.ApplyBatch(context.Background(), &feeds.Batch{Cursor: feeds.StreamCursor{TimeUS: t0 - 20_000_000}}); err != nil {
		t.Fatal(err)
	}
	resetTo := time.UnixMicro(t0 - 10_000_000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := &ingester{store: store, batchSize: 10, catchupSize: 1000, partSize: 20, partTime: time.Hour, batchInterval: time.Minute}
	registerBatchCuts(prometheus.NewRegistry(), in)
	restarts := 0
	in.restart = func() uint64 { restarts++; return 1 }
	registered := make(chan error, 1)
	consumed := 0
	in.consumed = func(*jetstream.Event) {
		switch consumed++; consumed {
		case 1:
			// Before the first part opens its transaction, as the
			// operator's command would between two commits.
			if _, err := tool.ResetJetstream(context.Background(), resetTo, "ops", time.Now()); err != nil {
				t.Error(err)
				cancel()
			}
		case 30:
			// The first part (events 1–20) is applied and holds the
			// write lock: an urgent write cuts the batch there.
			go func() {
				_, err := store.RegisterViewer(feeds.Urgent(context.Background()), "did:plc:newviewer234567abcdefghi", "following", time.Now())
				registered <- err
			}()
			waitWanted(t, store, registered)
		}
	}
	in.log, in.sweepIdle, in.now = slog.New(slog.DiscardHandler), time.Hour, time.Now
	var commits []feeds.BatchResult
	in.afterCommit = func(res feeds.BatchResult) {
		commits = append(commits, res)
		if res.CursorReset {
			// The queued events are the old session's (0) and are
			// dropped now: nothing more would come.
			cancel()
		}
	}
	if err := in.Run(ctx, queuedPosts(backlog, shortPost)); err != nil {
		t.Fatal(err)
	}
	if err := <-registered; err != nil {
		t.Fatal(err)
	}
	if len(commits) != 1 || !commits[0].CursorReset || commits[0].Applied != 20 {
		t.Fatalf("commits %+v, want one: the cut, with the first part's 20 events, finding the reset", commits)
	}
	if restarts != 1 {
		t.Errorf("the consumer was asked to reconnect %d times, want once", restarts)
	}
	if got := store.Cursor().TimeUS; got != resetTo.UnixMicro() {
		t.Errorf("cursor at %d, want the reset position %d, not the cut's (the first part's last event, %d)", got, resetTo.UnixMicro(), t0+19)
	}
	// The first part's records were written by the cut; the rest (events
	// 21–30 taken, the 170 queued) were dropped.
	records := countRecords(t, path)
	if records != 20 {
		t.Errorf("%d records stored, want the first part's 20", records)
	}
}

// A daemon stopped while the rest of a cut batch is in memory commits
// that rest, with the events it takes on the way out, and stores the
// cursor of the last one: nothing taken off the queue is lost, and the
// cursor covers exactly what was written.
func TestAStopAfterACutCommitsTheRestInMemory(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	store := openIndexAllStoreAt(t, path)
	const backlog = 200
	in := &ingester{store: store, batchSize: 10, catchupSize: 1000, partSize: 20, partTime: time.Hour, batchInterval: time.Minute}
	registerBatchCuts(prometheus.NewRegistry(), in)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	registered := make(chan error, 1)
	consumed := 0
	in.consumed = func(*jetstream.Event) {
		switch consumed++; consumed {
		case 30:
			// The first part (events 1–20) holds the write lock: an
			// urgent write cuts the batch there, 21–30 in memory.
			go func() {
				_, err := store.RegisterViewer(feeds.Urgent(context.Background()), "did:plc:newviewer234567abcdefghi", "following", time.Now())
				registered <- err
			}()
			waitWanted(t, store, registered)
		case 35:
			// Stopped before the next part: the rest is 21–35.
			cancel()
		}
	}
	in.log, in.sweepIdle, in.now = slog.New(slog.DiscardHandler), time.Hour, time.Now
	var commits []feeds.BatchResult
	in.afterCommit = func(res feeds.BatchResult) { commits = append(commits, res) }
	if err := in.Run(ctx, queuedPosts(backlog, shortPost)); err != nil {
		t.Fatal(err)
	}
	if err := <-registered; err != nil {
		t.Fatal(err)
	}
	// On the way out the ingester takes up to batch_size more.
	if consumed != 35+in.batchSize {
		t.Fatalf("%d events taken, want 35 and batch_size (%d) more on the way out", consumed, in.batchSize)
	}
	if len(commits) != 2 || commits[0].Applied != 20 || commits[1].Applied != consumed-20 {
		t.Errorf("commits %+v, want the cut's 20 and the stop's %d", commits, consumed-20)
	}
	if got, want := store.Cursor().TimeUS, t0+int64(consumed)-1; got != want {
		t.Errorf("cursor at %d, want the last taken event's %d", got, want)
	}
	records := countRecords(t, path)
	if records != consumed {
		t.Errorf("%d records stored, want every one of the %d events taken", records, consumed)
	}
}

// waitWanted waits until an urgent write waits for the write lock the
// ingester holds. A write that ended first (it failed before asking)
// fails the test instead of leaving it spinning until the timeout; its
// result is put back for the test to read.
func waitWanted(t *testing.T, store *feeds.Store, result chan error) {
	t.Helper()
	for !store.WriterWanted() {
		select {
		case err := <-result:
			result <- err
			t.Errorf("the urgent write ended before it waited for the lock: %v", err)
			return
		default:
		}
		runtime.Gosched()
	}
}

// countRecords counts the records stored in the database at path.
func countRecords(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM records`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
