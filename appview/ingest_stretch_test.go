package appview

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/writelock"
	"github.com/atfeeds/appview/jetstream"
)

// A live batch waits, the next time, ten times what it took to apply,
// never less than batch_interval nor more than max_batch_interval; a
// backlog's batch leaves the next at batch_interval; a max_batch_interval
// at or below batch_interval never stretches.
func TestALiveBatchWaitsTenTimesTheLastApply(t *testing.T) {
	const base = 100 * time.Millisecond
	in := &ingester{batchSize: 1000, batchInterval: base, maxInterval: 5 * time.Second}
	for _, tc := range []struct {
		took, want time.Duration
	}{
		{0, base},
		{4 * time.Millisecond, base}, // a quiet stream's batch
		{10 * time.Millisecond, base},
		{40 * time.Millisecond, 400 * time.Millisecond}, // 100 events at 1,000 events/s
		{300 * time.Millisecond, 3 * time.Second},
		{time.Second, 5 * time.Second}, // bounded
		{time.Minute, 5 * time.Second}, // bounded
		{-time.Second, base},           // a clock stepped back
	} {
		if got := in.waitAfter(true, tc.took); got != tc.want {
			t.Errorf("after a live batch of %s: wait %s, want %s", tc.took, got, tc.want)
		}
		if got := in.waitAfter(false, tc.took); got != base {
			t.Errorf("after a backlog's batch of %s: wait %s, want batch_interval", tc.took, got)
		}
	}
	for _, maxInterval := range []time.Duration{0, 50 * time.Millisecond, base} {
		off := &ingester{batchInterval: base, maxInterval: maxInterval}
		if got := off.waitAfter(true, time.Second); got != base {
			t.Errorf("max_batch_interval %s: wait %s after a slow batch, want batch_interval", maxInterval, got)
		}
	}
}

// A batch whose wait ran out is a live stream's while less than a
// batch_size is queued behind it: a live stream's events come in bursts,
// a backlog's fill the queue.
func TestABatchThatRanOutOfTimeIsLiveUnlessABatchIsQueued(t *testing.T) {
	in := &ingester{batchSize: 1000}
	for queued, want := range map[int]bool{0: true, 370: true, 999: true, 1000: false, 16384: false} {
		if got := in.live(queued); got != want {
			t.Errorf("live(%d queued) = %v, want %v", queued, got, want)
		}
	}
}

// A stretched batch does not stop at batch_size on a live stream: it
// grows to catchup_batch_size or waits out its interval.
func TestAStretchedBatchGrowsPastBatchSize(t *testing.T) {
	in := &ingester{batchSize: 100, catchupSize: 1000, batchInterval: 100 * time.Millisecond, maxInterval: 5 * time.Second}
	if !in.full(100, 0, 0) {
		t.Fatal("an unstretched live batch does not flush at batch_size")
	}
	in.interval.Store(int64(2 * time.Second))
	if in.full(100, 0, 0) || in.full(999, 0, 0) {
		t.Error("a stretched live batch flushed before catchup_batch_size")
	}
	if !in.full(1000, 0, 0) {
		t.Error("a stretched batch did not flush at catchup_batch_size")
	}
	if !in.full(10, 0, maxBatchBytes) {
		t.Error("a stretched batch went past the byte bound")
	}
}

// liveIngester runs an ingester over a real store, fed one event at a
// time through an unbuffered channel: nothing is ever queued, as on a live
// stream. Its batches are small (batch_size 2, catchup_batch_size 8), its
// wait 20 ms stretching up to an hour.
type liveIngester struct {
	t       *testing.T
	in      *ingester
	events  chan jetstream.Event
	source  chan jetstream.Event
	commits chan int
	cancel  context.CancelFunc
	done    chan error
	// onCommit, when set, runs after each commit, before the batch's
	// sweep tick.
	onCommit atomic.Pointer[func()]
}

const liveBase = 20 * time.Millisecond

func startLiveIngester(t *testing.T, store *feeds.Store, now func() time.Time, sweepIdle time.Duration) *liveIngester {
	t.Helper()
	l := &liveIngester{
		t: t, events: make(chan jetstream.Event), source: queuedPosts(60, shortPost),
		commits: make(chan int, 10), done: make(chan error, 1),
	}
	l.in = &ingester{
		store: store, batchSize: 2, catchupSize: 8,
		batchInterval: liveBase, maxInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: sweepIdle, now: now,
		afterCommit: func(res feeds.BatchResult) {
			if f := l.onCommit.Load(); f != nil {
				(*f)()
			}
			l.commits <- res.Applied
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go func() { l.done <- l.in.Run(ctx, l.events) }()
	return l
}

// send hands the ingester n events, each once it takes it.
func (l *liveIngester) send(n int) {
	for range n {
		l.events <- <-l.source
	}
}

// expect waits for the next commit, of want events.
func (l *liveIngester) expect(want int) {
	l.t.Helper()
	select {
	case got := <-l.commits:
		if got != want {
			l.t.Fatalf("a batch of %d events, want %d", got, want)
		}
	case <-time.After(10 * time.Second):
		l.t.Fatalf("no batch of %d events committed", want)
	}
}

// waitFor waits until the next batch's wait is want.
func (l *liveIngester) waitFor(want time.Duration) {
	l.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); l.in.currentInterval() != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			l.t.Fatalf("the wait is %s, want %s", l.in.currentInterval(), want)
		}
	}
}

func (l *liveIngester) stop() {
	l.t.Helper()
	l.cancel()
	if err := <-l.done; err != nil {
		l.t.Fatal(err)
	}
}

// twoHourBatches is a clock each reading of which advances an hour: a
// flush reads it before the write, at the sweep's tick and after, so every
// batch takes two hours, and ten times that is past the hour's bound.
func twoHourBatches() func() time.Time {
	var clock atomic.Int64
	return func() time.Time { return time.Unix(0, clock.Add(int64(time.Hour))) }
}

// Through a real store: a slow live batch stretches the next one past
// batch_size; a batch that filled stretches nothing, however long it took.
func TestASlowLiveBatchStretchesTheNextOne(t *testing.T) {
	l := startLiveIngester(t, openIndexAllStore(t), twoHourBatches(), time.Hour)
	// One event, then its 20 ms wait runs out: a live batch, of two
	// hours. The next waits the bound, an hour (no timer fires again
	// during the test).
	l.send(1)
	l.expect(1)
	l.send(1) // taken once the flush, and the new wait, are done
	if got := l.in.currentInterval(); got != time.Hour {
		t.Fatalf("after a live batch of two hours the wait is %s, want the bound (1h)", got)
	}
	// Stretched, the batch grows past batch_size (2) to
	// catchup_batch_size (8), though nothing is queued. Filled, its two
	// hours stretch nothing. No event is sent after it, so no batch (and
	// no timer) is open: the wait changes once, when the flush ends.
	l.send(7)
	l.expect(8)
	l.waitFor(liveBase)
	l.stop()
}

// The idle timer ticks the sweep on a quiet stream only: while a stretched
// batch is open (sweep.idle_interval below max_batch_interval, or equal
// to it, the defaults, where the idle timer runs out just before the
// batch's), its commit is a moment away and ticks the sweep itself. An
// idle tick there visits a whole budget, and again every 50 ms while it
// leaves work pending, on a busy writer.
func TestNoIdleSweepTickWhileAStretchedBatchIsOpen(t *testing.T) {
	var reads atomic.Int64 // of the clock: a flush reads it thrice, an idle tick once
	clock := twoHourBatches()
	now := func() time.Time {
		reads.Add(1)
		return clock()
	}
	l := startLiveIngester(t, openIndexAllStore(t), now, 30*time.Millisecond)
	l.send(1)
	l.expect(1)
	// The next batch opens with an hour's wait, and stays open.
	l.send(1)
	if got := l.in.currentInterval(); got != time.Hour {
		t.Fatalf("the wait is %s after a live batch of two hours, want an hour", got)
	}
	before := reads.Load()
	time.Sleep(300 * time.Millisecond) // ten idle intervals
	if n := reads.Load() - before; n != 0 {
		t.Errorf("%d idle sweep ticks while a batch was open", n)
	}
	l.stop()
}

// A stream quiet for sweep.idle_interval is not a busy one: the wait a
// busy stretch left behind goes back to batch_interval, so the first post
// after a lull is not held for it.
func TestAQuietStreamForgetsAStretchedWait(t *testing.T) {
	l := startLiveIngester(t, openIndexAllStore(t), twoHourBatches(), 200*time.Millisecond)
	l.send(1)
	l.expect(1)
	// The flush ends with the wait stretched to an hour (the idle timer
	// is rearmed then, and runs out 200 ms later); then nothing comes.
	l.waitFor(time.Hour)
	l.waitFor(liveBase)
	l.stop()
}

// Waiting for the write lock is not applying: a live batch that waited
// half a second behind another process's transaction, then applied in a
// few milliseconds, leaves the next batch's wait near batch_interval, not
// ten times the half second.
func TestALockWaitDoesNotStretchTheNextBatch(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	l := startLiveIngester(t, openIndexAllStoreAt(t, path), time.Now, time.Hour)
	const held = 500 * time.Millisecond
	release := writelock.Hold(t, path)
	go func() {
		time.Sleep(held)
		release()
	}()
	began := time.Now()
	l.send(1) // its 20 ms wait runs out while the lock is held
	l.expect(1)
	if waited := time.Since(began); waited < held {
		t.Fatalf("the batch committed after %s, before the lock was released (%s)", waited, held)
	}
	l.send(1) // taken once the flush, and the new wait, are done
	// The apply itself takes milliseconds; ten times the lock wait would
	// be five seconds.
	if got := l.in.currentInterval(); got >= held {
		t.Errorf("after a batch that waited %s for the lock the wait is %s, want under %s", held, got, held)
	}
	l.stop()
}

// A committed batch keeps none of its records reachable: the ingester
// reuses its batch's slice, and a catch-up batch's elements once held up
// to maxBatchBytes of records' bytes until later batches wrote over them.
func TestACommittedBatchKeepsNoRecordReachable(t *testing.T) {
	l := startLiveIngester(t, openIndexAllStore(t), time.Now, time.Hour)
	post := <-l.source
	record := new([1 << 20]byte)
	n := copy(record[:], shortPost)
	post.Commit.Record = record[:n]
	freed := make(chan struct{})
	runtime.SetFinalizer(record, func(*[1 << 20]byte) { close(freed) })
	record = nil
	l.events <- post
	l.expect(1)
	// No event follows, so nothing writes over the batch's first element.
	deadline := time.After(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			l.stop()
			return
		case <-deadline:
			t.Fatal("the committed batch's record is still reachable")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The sweep tick after a batch waits for the write lock like the batch
// does, and that wait is not applying either: a tick held half a second
// behind another process's transaction leaves the next batch's wait near
// batch_interval.
func TestASweepTicksLockWaitDoesNotStretchTheNextBatch(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	// A visit an event, so every batch that writes a feed row runs a
	// slice, which begins a transaction.
	store := openIndexAllStoreWith(t, path, func(o *feeds.Options) {
		o.Sweep = feeds.SweepOptions{Actors: 1, BatchEvents: 1}
	})
	l := startLiveIngester(t, store, time.Now, time.Hour)
	// A viewer follows the author of the posts sent next.
	author := syntax.DID("did:plc:author00000000000000000000")
	post := func() jetstream.Event {
		ev := <-l.source
		ev.DID = author
		return ev
	}
	l.events <- jetstream.Event{
		DID: "did:plc:viewer00000000000000000000", TimeUS: t0 - 1, Kind: jetstream.KindCommit,
		Commit: &jetstream.Commit{
			Operation: jetstream.OpCreate, Collection: followNSID, RKey: "3kfollow2222a",
			Rev: "3kfollow2222a", CID: "bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y",
			Record:  json.RawMessage(`{"$type":"app.bsky.graph.follow","subject":"` + string(author) + `","createdAt":"2024-01-01T00:00:00Z"}`),
			Subject: author,
		},
	}
	l.expect(1)
	const held = 500 * time.Millisecond
	hold := func() {
		release := writelock.Hold(t, path)
		go func() {
			time.Sleep(held)
			release()
		}()
	}
	l.onCommit.Store(&hold)
	began := time.Now()
	l.events <- post()
	l.expect(1)
	l.onCommit.Store(nil)
	l.events <- post() // taken once the flush, its tick and the new wait are done
	if waited := time.Since(began); waited < held {
		t.Fatalf("the tick was done after %s, before the lock was released (%s)", waited, held)
	}
	if got := l.in.currentInterval(); got >= held {
		t.Errorf("after a tick that waited %s for the lock the wait is %s, want under %s", held, got, held)
	}
	l.stop()
}
