package appview

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/writelock"
	"github.com/atfeeds/appview/jetstream"
)

// A backlog's batch is applied to its transaction part by part as the
// ingester takes it off the queue, and committed once, at
// catchup_batch_size, with the cursor of its last event: a part's records
// are no longer held in memory when the batch commits.
func TestABacklogsBatchIsAppliedInPartsAndCommittedOnce(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 250 // batches of 100, 100 and 50, cut where the queue runs dry
	events, freed := backlogWithALargeFirstRecord(backlog)
	freedAtFirstCommit := false
	in := &ingester{store: store, batchSize: 10, catchupSize: 100, partSize: 20, batchInterval: time.Minute}
	applied := runBacklog(t, in, events, backlog, func(batch int) {
		if batch == 0 {
			freedAtFirstCommit = collected(freed, 5*time.Second)
		}
	})
	if len(applied) != 3 || applied[0] != 100 || applied[1] != 100 || applied[2] != 50 {
		t.Errorf("batches applied %v, want [100 100 50]", applied)
	}
	if !freedAtFirstCommit {
		t.Error("the first part's record was still reachable when its batch committed")
	}
	if got, want := store.Cursor().TimeUS, t0+backlog-1; got != want {
		t.Errorf("cursor at %d, want the last event's %d", got, want)
	}
}

// A backlog that runs dry under an open transaction is committed at once,
// even while the batch's wait is stretched: the transaction holds the
// write lock, which the wait would hold from every other writer.
func TestABacklogRunDryUnderAnOpenTransactionCommitsAtOnce(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 50
	events, _ := backlogWithALargeFirstRecord(backlog)
	committed := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := &ingester{
		store: store, batchSize: 10, catchupSize: 100, partSize: 20,
		batchInterval: 30 * time.Second, maxInterval: time.Minute,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: time.Now,
		afterCommit: func(res feeds.BatchResult) { committed <- res.Applied },
	}
	in.interval.Store(int64(time.Minute)) // stretched by an earlier busy batch
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, events) }()
	select {
	case n := <-committed:
		if n != backlog {
			t.Errorf("committed %d events, want the %d queued", n, backlog)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the batch was not committed when the queue ran dry")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// runBacklog runs the ingester over n queued events until all are
// committed and returns the events each batch applied; atCommit, when
// set, runs at each commit (batch counts from 0).
func runBacklog(t *testing.T, in *ingester, events chan jetstream.Event, n int, atCommit func(batch int)) []int {
	t.Helper()
	var applied []int
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in.log, in.sweepIdle = slog.New(slog.DiscardHandler), time.Hour
	if in.now == nil {
		in.now = time.Now
	}
	in.afterCommit = func(res feeds.BatchResult) {
		if atCommit != nil {
			atCommit(len(applied))
		}
		if applied = append(applied, res.Applied); total(applied) == n {
			cancel()
		}
	}
	if err := in.Run(ctx, events); err != nil {
		t.Fatal(err)
	}
	return applied
}

// largePost is a post of about a page.
var largePost = json.RawMessage(`{"$type":"app.bsky.feed.post","text":"` + strings.Repeat("x", 3500) + `"}`)

// backlogWithALargeFirstRecord queues n posts, the first with a 1 MiB
// record whose collection closes freed.
func backlogWithALargeFirstRecord(n int) (chan jetstream.Event, chan struct{}) {
	source := queuedPosts(n, shortPost)
	events := make(chan jetstream.Event, n)
	first := <-source
	record := new([1 << 20]byte)
	first.Commit.Record = record[:copy(record[:], shortPost)]
	freed := make(chan struct{})
	runtime.SetFinalizer(record, func(*[1 << 20]byte) { close(freed) })
	events <- first
	for range n - 1 {
		events <- <-source
	}
	return events, freed
}

// collected runs the collector until freed closes, for up to wait.
func collected(freed chan struct{}, wait time.Duration) bool {
	deadline := time.After(wait)
	for {
		runtime.GC()
		select {
		case <-freed:
			return true
		case <-deadline:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A backlog's batch applied in parts is not cut by its wait, which a part
// outlasts: it grows to catchup_batch_size while events are queued.
func TestABacklogsBatchOutlastsItsWait(t *testing.T) {
	store := openIndexAllStore(t)
	// Posts of about a page each: a part of 1,000 takes far longer to
	// apply than the 10 ms wait, and far less to take off the queue.
	const backlog = 5000
	in := &ingester{store: store, batchSize: 100, catchupSize: 3000, partSize: 1000, batchInterval: 10 * time.Millisecond}
	applied := runBacklog(t, in, queuedPosts(backlog, largePost), backlog, nil)
	if len(applied) != 2 || applied[0] != 3000 || applied[1] != 2000 {
		t.Errorf("batches applied %v, want [3000 2000]", applied)
	}
}

// A backlog's batch applied in parts is committed once its records' bytes
// reach the bound, whatever its count: large records would otherwise make
// one transaction, and the WAL it leaves, gigabytes.
func TestABacklogsBatchInPartsIsBoundedInBytes(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 100
	in := &ingester{store: store, batchSize: 10, catchupSize: 1000, partSize: 10, backlogBytes: 40 * len(largePost), batchInterval: time.Minute}
	applied := runBacklog(t, in, queuedPosts(backlog, largePost), backlog, nil)
	if len(applied) != 3 || applied[0] != 40 || applied[1] != 40 || applied[2] != 20 {
		t.Errorf("batches applied %v, want [40 40 20]", applied)
	}
}

// A backlog's first part waits out a write lock another process holds, as
// a whole batch does, and the batch then commits every event once.
func TestABacklogsFirstPartWaitsOutAForeignWriteLock(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	store := openIndexAllStoreAt(t, path)
	release := writelock.Hold(t, path)
	time.AfterFunc(300*time.Millisecond, release)
	const backlog = 50
	in := &ingester{store: store, batchSize: 10, catchupSize: 100, partSize: 20, batchInterval: time.Minute}
	began := time.Now()
	applied := runBacklog(t, in, queuedPosts(backlog, shortPost), backlog, nil)
	if waited := time.Since(began); waited < 300*time.Millisecond {
		t.Errorf("the batch committed after %s, before the lock was released", waited)
	}
	if len(applied) != 1 || applied[0] != backlog {
		t.Errorf("batches applied %v, want [%d]", applied, backlog)
	}
	if got := store.Cursor().TimeUS; got != t0+backlog-1 {
		t.Errorf("cursor %d, want the backlog's last event %d", got, t0+backlog-1)
	}
}

// A backlog's batch applied in parts is committed once it has been open
// for its hold limit, whatever its count: it holds the write lock, and the
// cursor waits for its commit. The clock moves a second each time it is
// read.
func TestABacklogsBatchInPartsIsBoundedInTime(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 200
	in := &ingester{store: store, batchSize: 10, catchupSize: 1000, partSize: 20, backlogHold: 3 * time.Second, batchInterval: time.Minute}
	clock := time.Unix(1_700_000_000, 0)
	in.now = func() time.Time {
		clock = clock.Add(time.Second)
		return clock
	}
	applied := runBacklog(t, in, queuedPosts(backlog, shortPost), backlog, nil)
	if len(applied) < 2 {
		t.Errorf("batches applied %v, want the backlog cut by time into several", applied)
	}
	for _, n := range applied {
		if n > 100 {
			t.Errorf("a batch applied %d events, more than five parts", n)
		}
	}
}

// A backlog's batch applied in parts commits as soon as an urgent writer in
// the process (a new viewer's registration, which a getFeed request waits
// on) waits for the write lock and no part is being applied, and the
// writer then gets in before the next batch opens: it waits out a part at
// most, not the whole batch. The events taken since the last part are not
// applied first: they stay in the batch, and its cursor does not cover
// them.
func TestABacklogsBatchMakesWayForAnUrgentWriter(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 200
	// Parts of 20 events whatever they take; a cut makes them no
	// smaller than they are (urgentCut, minPartSize).
	in := &ingester{store: store, batchSize: 10, catchupSize: 1000, partSize: 20, partTime: time.Hour, batchInterval: time.Minute}
	registerBatchCuts(prometheus.NewRegistry(), in)
	registered := writeAtThe30thEvent(in, func() error {
		_, err := store.RegisterViewer(feeds.Urgent(context.Background()), "did:plc:newviewer234567abcdefghi", "following", time.Now())
		return err
	}, func() {
		for !store.WriterWanted() {
			runtime.Gosched()
		}
	})
	registeredFirst := false
	var cursorAtCut int64
	applied := runBacklog(t, in, queuedPosts(backlog, shortPost), backlog, func(batch int) {
		switch batch {
		case 0:
			cursorAtCut = store.Cursor().TimeUS
		case 1:
			registeredFirst = writeDone(t, registered)
		}
	})
	if len(applied) != 2 || applied[0] != 20 || applied[1] != 180 {
		t.Errorf("batches applied %v, want [20 180]: the open batch committed its first part, and the events taken after it went to the next", applied)
	}
	if want := t0 + 19; cursorAtCut != want {
		t.Errorf("cursor at the cut %d, want the first part's last event's %d", cursorAtCut, want)
	}
	if !registeredFirst {
		t.Error("the registration had not committed when the next batch did")
	}
	if got := testutil.ToFloat64(in.cutForWriters); got != 1 {
		t.Errorf("appview_ingest_batches_cut_total = %v, want 1", got)
	}
	if in.urgentUntil.IsZero() {
		t.Error("the cut did not shorten the parts that follow it (urgentCut)")
	}
}

// An urgent writer that comes while a backlog's part is being applied
// waits for the change in hand, not the rest of the part (a free stop,
// and the part has run minStopTime too, so it does not rest on free
// stops; stopAfterProgress): the part stops, the batch commits what it
// applied with the cursor of its parts applied in full, and the part's
// rest starts the next batch.
func TestABacklogsPartStopsForAnUrgentWriterThatComesWhileItIsApplied(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 300
	clock := time.Now()
	in := &ingester{store: store, batchSize: 10, catchupSize: 1000, partSize: 100, partTime: time.Hour, batchInterval: time.Minute,
		now: func() time.Time { return clock }}
	registerBatchCuts(prometheus.NewRegistry(), in)
	registered := make(chan error, 1)
	asked := 0
	in.partStop = func() bool {
		// Asked before every change of a part but its first: the 109th
		// time is before the second part's eleventh change, which has
		// run minStopTime by then (stopAfterProgress).
		if asked++; asked == 99+10 {
			clock = clock.Add(minStopTime)
			go func() {
				_, err := store.RegisterViewer(feeds.Urgent(context.Background()), "did:plc:newviewer234567abcdefghi", "following", time.Now())
				registered <- err
			}()
			for !store.WriterWanted() {
				runtime.Gosched()
			}
		}
		return store.WriterWanted()
	}
	var cursorAtCut int64
	registeredFirst := false
	applied := runBacklog(t, in, queuedPosts(backlog, shortPost), backlog, func(batch int) {
		switch batch {
		case 0:
			cursorAtCut = store.Cursor().TimeUS
		case 1:
			registeredFirst = writeDone(t, registered)
		}
	})
	if len(applied) != 2 || applied[0] != 110 || applied[1] != 190 {
		t.Errorf("batches applied %v, want [110 190]: the second part stopped at its eleventh change", applied)
	}
	if want := t0 + 99; cursorAtCut != want {
		t.Errorf("cursor at the cut %d, want %d: the first part's last event (the second part's changes applied are not covered)", cursorAtCut, want)
	}
	if !registeredFirst {
		t.Error("the registration had not committed when the next batch did")
	}
	if got := testutil.ToFloat64(in.cutForWriters); got != 1 {
		t.Errorf("appview_ingest_batches_cut_total = %v, want 1", got)
	}
	if got, want := store.Cursor().TimeUS, t0+backlog-1; got != want {
		t.Errorf("cursor at %d, want the last event's %d", got, want)
	}
}

// A write no request waits on (here the last reads of reads already
// served; in a catch-up, mostly the followee backfills its follows start)
// does not cut a backlog's batch short: it waits for the commit.
func TestABacklogsBatchIsNotCutForAWriteNobodyWaitsOn(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 200
	viewer := syntax.DID("did:plc:touchedviewer4567abcdefg")
	if _, err := store.RegisterViewer(context.Background(), viewer, "following", time.Unix(1_700_000_000, 0)); err != nil {
		t.Fatal(err)
	}
	in := &ingester{store: store, batchSize: 10, catchupSize: 1000, partSize: 20, batchInterval: time.Minute}
	registerBatchCuts(prometheus.NewRegistry(), in)
	touched := writeAtThe30thEvent(in, func() error {
		return store.TouchViewers(context.Background(), []feeds.ViewerTouch{{Viewer: viewer, Feed: "following", At: time.Now()}})
	}, func() {
		time.Sleep(50 * time.Millisecond) // the touch is waiting for the lock
	})
	applied := runBacklog(t, in, queuedPosts(backlog, shortPost), backlog, nil)
	if len(applied) != 1 || applied[0] != backlog {
		t.Errorf("batches applied %v, want [%d]: the batch was cut for the touch", applied, backlog)
	}
	if got := testutil.ToFloat64(in.cutForWriters); got != 0 {
		t.Errorf("appview_ingest_batches_cut_total = %v, want 0", got)
	}
	if err := <-touched; err != nil {
		t.Fatal(err)
	}
}

// writeDone says whether the write whose result comes on result has
// finished, failing t if it failed.
func writeDone(t *testing.T, result chan error) bool {
	t.Helper()
	select {
	case err := <-result:
		if err != nil {
			t.Error(err)
		}
		return true
	default:
		return false
	}
}

// writeAtThe30thEvent starts write in a goroutine when the ingester takes
// its 30th event (with parts of 20, the first part is applied and its
// transaction holds the write lock) and holds the ingester until waiting
// returns. The channel gets write's result.
func writeAtThe30thEvent(in *ingester, write func() error, waiting func()) chan error {
	result := make(chan error, 1)
	consumed := 0
	in.consumed = func(*jetstream.Event) {
		if consumed++; consumed != 30 {
			return
		}
		go func() { result <- write() }()
		waiting()
	}
	return result
}

// A backlog's parts are sized by time when partTime is set: a part that
// took ten times its time makes the next a tenth of its size, a fast one
// lets the next grow back to partSize, and none falls under minPartSize.
func TestABacklogsPartsAreSizedByTheirTime(t *testing.T) {
	in := &ingester{batchSize: 100, catchupSize: 60000, partSize: 8192, partTime: time.Second}
	b := &feeds.Batch{Backlog: true}
	changes := make([]feeds.Change, in.partSize)
	limit := func() int {
		for n := 1; ; n++ {
			b.Changes = changes[:n]
			if in.partFull(b, 1, n, 0) {
				return n
			}
		}
	}
	if got := limit(); got != 8192 {
		t.Fatalf("first part of %d events, want partSize 8192", got)
	}
	for _, step := range []struct {
		n    int
		took time.Duration
		want int
	}{
		{8192, 10 * time.Second, 819}, // 100,000 viewers: a part took 10 s
		{819, time.Second, 819},
		{819, 100 * time.Millisecond, 8190},
		{8190, time.Millisecond, 8192}, // capped at partSize
		{8192, time.Hour, minPartSize}, // floored
		{minPartSize, 0, 8192},         // too fast to time
	} {
		in.adaptPart(step.n, step.took)
		if got := limit(); got != step.want {
			t.Errorf("after a part of %d events in %s, the next holds %d, want %d", step.n, step.took, got, step.want)
		}
	}
	in.partTime = 0
	in.partLimit = 0
	in.adaptPart(8192, time.Hour)
	if got := limit(); got != 8192 {
		t.Errorf("without partTime a part holds %d, want partSize", got)
	}
}

// After a batch was cut for an urgent writer, the parts of the next
// urgentWindow take urgentPartTime, starting with the very next one: a
// first read's next write waits a tenth as long. Then they grow back.
func TestABacklogsPartsShrinkForAWhileAfterACutForAnUrgentWriter(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	in := &ingester{batchSize: 100, catchupSize: 60000, partSize: 8192, partTime: time.Second,
		now: func() time.Time { return clock }}
	in.adaptPart(8192, time.Second)
	in.urgentCut()
	if in.partLimit != 819 {
		t.Fatalf("the part after the cut holds %d events, want a tenth of the last (819)", in.partLimit)
	}
	in.adaptPart(819, 100*time.Millisecond)
	if in.partLimit != 819 {
		t.Errorf("within the window a part that took 100 ms is followed by %d events, want 819", in.partLimit)
	}
	clock = clock.Add(urgentWindow)
	in.adaptPart(819, 100*time.Millisecond)
	if in.partLimit != 8190 {
		t.Errorf("after the window a part that took 100 ms is followed by %d events, want a second's worth (8190)", in.partLimit)
	}
}

// Each part applied to a backlog's batch sizes the next: here the clock
// moves 10 s each time it is read, so a part of 1,000 events takes 10 s
// and the next is cut to minPartSize.
func TestABacklogsSlowPartShrinksTheNext(t *testing.T) {
	store := openIndexAllStore(t)
	const backlog = 3000
	in := &ingester{store: store, batchSize: 10, catchupSize: 10000, partSize: 1000, partTime: time.Second,
		backlogHold: time.Duration(1 << 62), batchInterval: time.Minute}
	clock := time.Unix(1_700_000_000, 0)
	in.now = func() time.Time {
		clock = clock.Add(10 * time.Second)
		return clock
	}
	applied := runBacklog(t, in, queuedPosts(backlog, shortPost), backlog, nil)
	if total(applied) != backlog {
		t.Fatalf("batches applied %v", applied)
	}
	if in.partLimit != minPartSize {
		t.Errorf("after parts of 10 s the next part holds %d events, want %d", in.partLimit, minPartSize)
	}
}
