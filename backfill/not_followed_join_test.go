package backfill

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
)

// v1 unfollows x, its only follower, while x's posts are being listed: the
// listing's page stores nothing (x left the scope) and the run returns.
// Just then v2's first read, whose follow listing has just stored its
// follow of x, asks for x's posts and joins that run on its way out. It
// used to take the run's "done" for its own: x's listing was left
// unfinished and not wanted, so v2's feed was built without x and no later
// listing merged x into it. A caller that joins a run that stored nothing
// because nobody followed the account lists it itself.
func TestAJoinerOfAListingThatFoundNoFollowerListsItItself(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	v1, v2, x := w.account("v1"), w.account("v2"), w.account("x")
	w.post(x, 10)
	w.follow(v1, x, 1)
	w.follow(v2, x, 3)
	for _, v := range []string{"v1", "v2"} {
		if _, err := w.store.RegisterViewer(ctx, did(v), "following", w.clock); err != nil {
			t.Fatal(err)
		}
	}
	// v1's first read lists its follow of x.
	if err := w.svc.ensureListing(ctx, v1, followNSID, 10_000, "follows"); err != nil {
		t.Fatal(err)
	}

	release, asked := make(chan struct{}), make(chan struct{}, 1)
	var released atomic.Bool
	w.gate.Store(func(r *http.Request) {
		q := r.URL.Query()
		if q.Get("repo") == string(x) && !released.Load() {
			asked <- struct{}{}
			<-release
		}
	})
	var calls atomic.Int32
	joined := make(chan error, 1)
	waiting := make(chan struct{}, 1)
	w.onJoin.Store(func(k accountKey) {
		if k.account == x {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
	})
	w.onNow.Store(func(time.Time) {
		// The third reading of the clock after x's page came back is the
		// run's duration, after its page found no follower and before the
		// run leaves the shared map.
		if !released.Load() || calls.Add(1) != 3 {
			return
		}
		if err := w.svc.ensureListing(ctx, v2, followNSID, 10_000, "follows"); err != nil {
			t.Error(err)
		}
		go func() { joined <- w.svc.ensureAccount(ctx, x, postNSID) }()
		select {
		case <-waiting: // the joiner found the run and waits on it
		case <-time.After(10 * time.Second):
			t.Error("the second ensureAccount never joined the run")
		}
	})
	owner := make(chan error, 1)
	go func() { owner <- w.svc.ensureAccount(ctx, x, postNSID) }()
	<-asked
	// v1's unfollow of x, as the stream delivers it.
	if _, err := w.store.ApplyBatch(ctx, &feeds.Batch{Changes: []feeds.Change{{
		DID: v1, Collection: followNSID, RKey: tid(1), Op: feeds.OpDelete, Rev: tid(2).String(), TimeUS: 2,
	}}, Cursor: feeds.StreamCursor{TimeUS: 2}}); err != nil {
		t.Fatal(err)
	}
	released.Store(true)
	close(release)
	if err := <-owner; err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	w.onNow.Store(func(time.Time) {})
	st, err := w.store.ReadListing(ctx, x, postNSID)
	if err != nil {
		t.Fatal(err)
	}
	due, err := w.store.DueListings(ctx, w.clock, 6, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Complete && len(due) == 0 {
		t.Errorf("after v2's request for x's posts returned, x's listing is %+v and not due; want it complete (or at least due)", st)
	}
}
