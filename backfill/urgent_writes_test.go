package backfill

import (
	"context"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
)

// A first read's writes are urgent (feeds.Urgent): a getFeed request waits
// on them, so each says it is waiting for the write lock, and a catch-up's
// open batch commits early for it. Here an open batch holds the lock
// twice: the registration waits for the first, the run's claim for the
// second.
func TestAFirstReadsWritesAskACatchUpBatchToMakeWay(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	alice := w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)
	ctx := context.Background()
	hold := func() *feeds.OpenBatch {
		o, err := w.store.BeginBatch(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	waitWanted := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !w.store.WriterWanted() {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not ask the open batch to make way", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	o := hold()
	done := make(chan error, 1)
	go func() { done <- w.svc.Ensure(ctx, viewer, "following", "test") }()
	waitWanted("the registration")
	o.Rollback()
	o = hold() // taken after the registration's write (feeds: makeWay)
	waitWanted("the first read's run")
	o.Rollback()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Fatalf("feed = %v, want alice's post", got)
	}
}
