package appview

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
)

// A live batch waits ten times what the last one took to apply, never
// less than batch_interval nor more than max_batch_interval; a
// max_batch_interval at or below batch_interval never stretches.
func TestALiveBatchWaitsTenTimesTheLastApply(t *testing.T) {
	in := &ingester{batchInterval: 100 * time.Millisecond, maxInterval: 5 * time.Second}
	for _, tc := range []struct {
		took, want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{4 * time.Millisecond, 100 * time.Millisecond}, // a quiet stream's batch
		{10 * time.Millisecond, 100 * time.Millisecond},
		{40 * time.Millisecond, 400 * time.Millisecond}, // 100 events at 1,000 events/s
		{300 * time.Millisecond, 3 * time.Second},
		{time.Second, 5 * time.Second},         // bounded
		{time.Minute, 5 * time.Second},         // a catch-up batch
		{-time.Second, 100 * time.Millisecond}, // a clock stepped back
	} {
		if got := in.nextInterval(tc.took); got != tc.want {
			t.Errorf("after a batch of %s: wait %s, want %s", tc.took, got, tc.want)
		}
	}
	for _, maxInterval := range []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond} {
		off := &ingester{batchInterval: 100 * time.Millisecond, maxInterval: maxInterval}
		if got := off.nextInterval(time.Second); got != 100*time.Millisecond {
			t.Errorf("max_batch_interval %s: wait %s after a slow batch, want batch_interval", maxInterval, got)
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

// Through a real store: a slow commit stretches the next live batch past
// batch_size, and a quick one brings batches back to batch_size. The
// clock is driven by the test: each reading advances it by step, so a
// flush, which reads it before the write, at the sweep's tick and after,
// takes two steps.
func TestASlowWriterStretchesTheNextLiveBatch(t *testing.T) {
	store := openIndexAllStore(t)
	var step atomic.Int64
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Add(step.Load())) }

	events := make(chan jetstream.Event) // unbuffered: nothing is ever queued, as on a live stream
	source := queuedPosts(120, shortPost)
	commits := make(chan int, 10)
	in := &ingester{
		store: store, batchSize: 10, catchupSize: 50,
		batchInterval: time.Minute, maxInterval: time.Hour,
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

	// The first batch applies in "2 h" (two steps of an hour): ten times
	// that is past the bound, so the next batch waits an hour. (No timer
	// fires during the test: the shortest wait is batch_interval, a
	// minute.)
	step.Store(int64(time.Hour))
	send(10)
	expect(10)
	send(1) // taken once the flush, and the new wait, are done
	if got := in.currentInterval(); got != time.Hour {
		t.Fatalf("after a slow batch the wait is %s, want the bound (1h)", got)
	}
	// Stretched: the batch grows past batch_size to catchup_batch_size,
	// though nothing is queued. It commits quickly.
	step.Store(0)
	send(49)
	expect(50)
	send(1)
	if got := in.currentInterval(); got != time.Minute {
		t.Fatalf("after a quick batch the wait is %s, want batch_interval (1m)", got)
	}
	send(9)
	expect(10)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
