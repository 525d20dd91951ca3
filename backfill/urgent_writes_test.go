package backfill

import (
	"context"
	"net/http"
	"sync"
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

// A followee's backfill lists an account unmarked: no request waits on
// it, and its pages do not cut a catch-up's batch. A first read that
// joins that listing waits on its pages, so from then on they are
// urgent.
func TestAFirstReadJoiningAFolloweesBackfillMakesItsWritesUrgent(t *testing.T) {
	w := newWorld(t, Config{})
	viewer := w.account("viewer")
	alice := w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)
	ctx := context.Background()
	asked, answer := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.gate.Store(func(r *http.Request) {
		q := r.URL.Query()
		if q.Get("repo") == string(alice) && q.Get("collection") == string(postNSID) {
			once.Do(func() { close(asked) })
			<-answer
		}
	})
	backfilled := make(chan error, 1)
	go func() { backfilled <- w.svc.ensureAccount(ctx, alice, postNSID) }()
	<-asked
	w.svc.mu.Lock()
	run := w.svc.accounts[accountKey{alice, postNSID}]
	w.svc.mu.Unlock()
	if run.urgency.Raised() {
		t.Fatal("a followee's backfill alone is urgent")
	}

	read := make(chan error, 1)
	go func() { read <- w.svc.Ensure(ctx, viewer, "following", "test") }()
	for deadline := time.Now().Add(10 * time.Second); !run.urgency.Raised(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first read did not join the followee's backfill")
		}
	}
	o, err := w.store.BeginBatch(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	close(answer) // the shared listing's page is now written
	for deadline := time.Now().Add(10 * time.Second); !w.store.WriterWanted(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			o.Rollback()
			t.Fatal("the joined listing's page did not ask the open batch to make way")
		}
	}
	o.Rollback()
	if err := <-backfilled; err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, viewer, 10); len(got) != 1 {
		t.Fatalf("feed = %v, want alice's post", got)
	}
}
