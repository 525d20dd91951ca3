package backfill

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
)

// A gap committed between a first read's CompleteFirstRead and its
// markComplete: the gap's hook cleared the memory of complete viewers
// first, and markComplete then put the viewer back, so its reads within
// the hour were answered from memory without the rebuild the gap asks for
// (found by a review of edff21e). The same window lies between any
// database read that finds a viewer complete (StoredViewer,
// RegisterViewer) and its markComplete; here the clock's hook commits the
// gap right after the first read did.
func TestAGapJustAfterAFirstReadCompletesIsNotHidden(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	viewer := w.account("viewer")
	var armed atomic.Bool
	var once sync.Once
	w.onNow.Store(func(now time.Time) {
		if !armed.Load() {
			return
		}
		if _, complete, _ := w.store.StoredViewer(ctx, viewer, "following"); complete {
			once.Do(func() {
				// The gap lands just after the first read committed.
				if _, err := w.store.RecordGap(ctx, feeds.Gap{Detected: now, CursorUS: 1, Size: time.Hour}); err != nil {
					t.Error(err)
				}
			})
		}
	})
	alice := w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)
	armed.Store(true)
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	armed.Store(false)
	if _, complete, _ := w.store.StoredViewer(ctx, viewer, "following"); complete {
		t.Fatal("the gap did not land: the viewer is still complete in the database")
	}
	// The database says the viewer is due a rebuild; the next read within
	// the hour runs it.
	before := w.pds.Requests(viewer, followNSID)
	w.advance(10 * time.Minute)
	if err := w.svc.Ensure(ctx, viewer, "following", "test"); err != nil {
		t.Fatal(err)
	}
	if after := w.pds.Requests(viewer, followNSID); after == before {
		t.Errorf("a read 10 minutes after the gap rebuilt nothing (follows listed %d times before and after): answered from memory", before)
	}
}

// markComplete drops what was read before a forgetComplete (a gap, a
// retirement), the way Ensure's StoredViewer and RegisterViewer paths use
// it, and keeps what was read after.
func TestMarkCompleteKeepsNothingReadBeforeAForget(t *testing.T) {
	w := newWorld(t, Config{})
	key := viewerKey{w.account("viewer"), "following"}
	before := w.svc.forgetsNow() // the database read starts
	w.svc.forgetComplete()       // a gap commits meanwhile
	w.svc.markComplete(key, w.clock, before)
	if _, ok := w.svc.complete.get(key); ok {
		t.Fatal("a viewer found complete before the gap is remembered complete after it")
	}
	w.svc.markComplete(key, w.clock, w.svc.forgetsNow())
	if _, ok := w.svc.complete.get(key); !ok {
		t.Fatal("a viewer found complete after the gap is not remembered")
	}
}
