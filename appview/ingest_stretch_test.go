package appview

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

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

// Through a real store: a slow live batch stretches the next one past
// batch_size; a batch that filled stretches nothing, however long it took.
// The apply times are driven by the test's clock: each reading advances
// it by step, and a flush reads it before the write, at the sweep's tick
// and after, so it takes two steps.
func TestASlowLiveBatchStretchesTheNextOne(t *testing.T) {
	store := openIndexAllStore(t)
	var step atomic.Int64
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Add(step.Load())) }
	step.Store(int64(time.Hour)) // every batch takes two hours

	events := make(chan jetstream.Event) // unbuffered: nothing is ever queued, as on a live stream
	source := queuedPosts(60, shortPost)
	commits := make(chan int, 10)
	const base = 20 * time.Millisecond
	in := &ingester{
		store: store, batchSize: 2, catchupSize: 8,
		batchInterval: base, maxInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: now,
		afterCommit: func(res feeds.BatchResult) { commits <- res.Applied },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, events) }()
	send := func(n int) {
		t.Helper()
		for range n {
			events <- <-source
		}
	}
	expect := func(want int) {
		t.Helper()
		select {
		case got := <-commits:
			if got != want {
				t.Fatalf("a batch of %d events, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no batch of %d events committed", want)
		}
	}
	wantWait := func(want time.Duration, after string) {
		t.Helper()
		if got := in.currentInterval(); got != want {
			t.Fatalf("after %s the wait is %s, want %s", after, got, want)
		}
	}

	// One event, then its 20 ms wait runs out: a live batch, of two
	// hours. The next waits the bound, an hour (no timer fires again
	// during the test).
	send(1)
	expect(1)
	send(1) // taken once the flush, and the new wait, are done
	wantWait(time.Hour, "a live batch of two hours")
	// Stretched, the batch grows past batch_size (2) to
	// catchup_batch_size (8), though nothing is queued. Filled, its two
	// hours stretch nothing.
	send(7)
	expect(8)
	// No event is sent after it, so no batch (and no timer) is open: the
	// wait changes once, when the flush ends.
	for deadline := time.Now().Add(10 * time.Second); in.currentInterval() != base; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			wantWait(base, "a batch that filled")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The idle timer ticks the sweep on a quiet stream only: while a stretched
// batch is open (sweep.idle_interval below max_batch_interval, or equal
// to it, the defaults, where the idle timer runs out just before the
// batch's), its commit is a moment away and ticks the sweep itself. An
// idle tick there visits a whole budget, and again every 50 ms while it
// leaves work pending, on a busy writer.
func TestNoIdleSweepTickWhileAStretchedBatchIsOpen(t *testing.T) {
	store := openIndexAllStore(t)
	var reads atomic.Int64 // of the clock: a flush reads it thrice, an idle tick once
	var clock atomic.Int64
	now := func() time.Time {
		reads.Add(1)
		return time.Unix(0, clock.Add(int64(time.Hour))) // every batch takes two hours
	}
	events := make(chan jetstream.Event)
	source := queuedPosts(10, shortPost)
	commits := make(chan int, 10)
	in := &ingester{
		store: store, batchSize: 2, catchupSize: 8,
		batchInterval: 20 * time.Millisecond, maxInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: 30 * time.Millisecond, now: now,
		afterCommit: func(res feeds.BatchResult) { commits <- res.Applied },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, events) }()
	events <- <-source
	select {
	case <-commits:
	case <-time.After(10 * time.Second):
		t.Fatal("the first batch did not commit")
	}
	// The next batch opens with an hour's wait, and stays open.
	events <- <-source
	if got := in.currentInterval(); got != time.Hour {
		t.Fatalf("the wait is %s after a live batch of two hours, want an hour", got)
	}
	before := reads.Load()
	time.Sleep(300 * time.Millisecond) // ten idle intervals
	if n := reads.Load() - before; n != 0 {
		t.Errorf("%d idle sweep ticks while a batch was open", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A stream quiet for sweep.idle_interval is not a busy one: the wait a
// busy stretch left behind goes back to batch_interval, so the first post
// after a lull is not held for it.
func TestAQuietStreamForgetsAStretchedWait(t *testing.T) {
	store := openIndexAllStore(t)
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Add(int64(time.Hour))) } // every batch takes two hours
	events := make(chan jetstream.Event)
	source := queuedPosts(10, shortPost)
	commits := make(chan int, 10)
	const base = 20 * time.Millisecond
	in := &ingester{
		store: store, batchSize: 2, catchupSize: 8,
		batchInterval: base, maxInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: 200 * time.Millisecond, now: now,
		afterCommit: func(res feeds.BatchResult) { commits <- res.Applied },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, events) }()
	events <- <-source
	select {
	case <-commits:
	case <-time.After(10 * time.Second):
		t.Fatal("the first batch did not commit")
	}
	// The flush ends with the wait stretched to an hour (the idle timer
	// is rearmed then, and runs out 200 ms later); then nothing comes.
	waitFor := func(want time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); in.currentInterval() != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the wait is %s, want %s", in.currentInterval(), want)
			}
		}
	}
	waitFor(time.Hour)
	waitFor(base)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Waiting for the write lock is not applying: a live batch that waited
// half a second behind another process's transaction, then applied in a
// few milliseconds, leaves the next batch's wait near batch_interval, not
// ten times the half second.
func TestALockWaitDoesNotStretchTheNextBatch(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	store := openIndexAllStoreAt(t, path)
	events := make(chan jetstream.Event)
	source := queuedPosts(10, shortPost)
	commits := make(chan int, 10)
	const base = 20 * time.Millisecond
	in := &ingester{
		store: store, batchSize: 2, catchupSize: 8,
		batchInterval: base, maxInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: time.Now,
		afterCommit: func(res feeds.BatchResult) { commits <- res.Applied },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, events) }()

	const held = 500 * time.Millisecond
	release := writelock.Hold(t, path)
	go func() {
		time.Sleep(held)
		release()
	}()
	began := time.Now()
	events <- <-source // its 20 ms wait runs out while the lock is held
	select {
	case <-commits:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch did not commit")
	}
	if waited := time.Since(began); waited < held {
		t.Fatalf("the batch committed after %s, before the lock was released (%s)", waited, held)
	}
	events <- <-source // taken once the flush, and the new wait, are done
	// The apply itself takes milliseconds; ten times the lock wait would
	// be five seconds.
	if got := in.currentInterval(); got >= held {
		t.Errorf("after a batch that waited %s for the lock the wait is %s, want under %s", held, got, held)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
