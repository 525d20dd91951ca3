package backfill

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// memo reports the entries and bytes the service remembers of complete
// and not-due viewers.
func (w *world) memo() (complete, notDue, completeBytes, notDueBytes int) {
	w.svc.mu.Lock()
	defer w.svc.mu.Unlock()
	return len(w.svc.complete.m), len(w.svc.notDue.m), w.svc.complete.bytes, w.svc.notDue.bytes
}

// The memory of complete viewers had no bound: every viewer found
// complete stayed in it until a gap or a retirement, and in a viewer
// TTL's first 30 days none is retired, so it grew with every new viewer
// anyone asked for. Here its bound is lowered to 20 and 50 viewers
// complete their first reads through Ensure.
func TestTheMemoryOfViewersIsBounded(t *testing.T) {
	w := newWorld(t, Config{})
	w.svc.mu.Lock()
	w.svc.complete.maxLen = 20
	w.svc.mu.Unlock()
	ctx := context.Background()
	for i := range 50 {
		viewer := w.account(fmt.Sprint("viewer", i))
		if err := w.svc.Ensure(ctx, viewer, "following", fmt.Sprint("client", i)); err != nil {
			t.Fatal(err)
		}
		if _, complete, err := w.store.StoredViewer(ctx, viewer, "following"); err != nil || !complete {
			t.Fatalf("viewer %d: complete %v, err %v", i, complete, err)
		}
		// A read within the hour is answered from memory, as before.
		if err := w.svc.Ensure(ctx, viewer, "following", fmt.Sprint("client", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _, _, _ := w.memo(); n > 20 {
		t.Fatalf("%d complete viewers remembered, bound 20", n)
	}
}

// notDue was bounded in entries (100k), but each entry holds the
// viewer's DID, which the client chooses, up to 2 KiB: at the bound that
// was 200 MiB. Here 100 viewers of 2 KiB DIDs, unresolvable, fail their
// first reads and are remembered as not due, under a 64 KiB bound.
func TestTheMemoryOfViewersIsBoundedInBytes(t *testing.T) {
	w := newWorld(t, Config{})
	const bound = 64 << 10
	w.svc.mu.Lock()
	w.svc.notDue.maxBytes = bound
	w.svc.mu.Unlock()
	ctx := context.Background()
	for i := range 100 {
		viewer, err := syntax.ParseDID(fmt.Sprintf("did:plc:%04d%s", i, strings.Repeat("a", 2000)))
		if err != nil {
			t.Fatal(err)
		}
		client := fmt.Sprint("client", i)
		// The first read fails; the next read finds it not due again.
		if err := w.svc.Ensure(ctx, viewer, "following", client); err != nil {
			t.Fatal(err)
		}
		if err := w.svc.Ensure(ctx, viewer, "following", client); err != nil {
			t.Fatal(err)
		}
	}
	_, n, _, bytes := w.memo()
	if n == 0 {
		t.Fatal("no viewer remembered as not due: the test does not reach markNotDue")
	}
	if held := n * (2012 + viewerEntryOverhead); held > bound || bytes > bound {
		t.Fatalf("%d not-due viewers of 2 KiB DIDs remembered (%d bytes, counted %d), bound %d", n, held, bytes, bound)
	}
}
