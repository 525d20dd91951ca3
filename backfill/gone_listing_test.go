package backfill

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds/pdstest"
)

// A listing that once failed as gone (RepoDeactivated) and later succeeds
// keeps gone=1: list() starts `next` from the stored state and resets
// Complete, Attempts, LastError and NextRetry on completion, never Gone.
// A reopened listing (the account left the scope) then stays gone, and
// wantListing and DueListings skip gone listings: a viewer who follows the
// account on the live stream, with the in-memory queue lost (full, or a
// restart), never gets its backlog; the durable path
// (TestLiveFollowsBacklogSurvivesALostQueue) does not work for it.
func TestAListingThatSucceedsAfterGoneIsNotGoneAnyMore(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Minute})
	ctx := context.Background()
	v1, v2, v3, x := w.account("v1"), w.account("v2"), w.account("v3"), w.account("x")
	rk1 := w.follow(v1, x, 1)
	rk2 := w.follow(v2, x, 2)
	w.post(x, 10)

	// X's repo is deactivated at v1's first read.
	w.pds.FailN(x, postNSID, pdstest.FaultRepoDeactivated, 1)
	if err := w.svc.Ensure(ctx, v1, "following", "c1"); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.store.ReadListing(ctx, x, postNSID); !st.Gone {
		t.Fatalf("setup: listing %+v, want gone", st)
	}
	// Reactivated; v2's first read lists X fine.
	w.advance(2 * time.Minute)
	if err := w.svc.Ensure(ctx, v2, "following", "c2"); err != nil {
		t.Fatal(err)
	}
	st, _ := w.store.ReadListing(ctx, x, postNSID)
	if !st.Complete {
		t.Fatalf("setup: listing %+v, want complete", st)
	}
	if st.Gone {
		t.Errorf("a listing that completed is still marked gone: %+v", st)
	}

	// Both unfollow X on the stream: X leaves the scope, its listing is
	// reopened.
	var changes []feeds.Change
	for i, f := range []struct {
		who syntax.DID
		rk  syntax.RecordKey
	}{{v1, rk1}, {v2, rk2}} {
		changes = append(changes, feeds.Change{DID: f.who, Collection: followNSID, RKey: f.rk, Op: feeds.OpDelete,
			Rev: tid(100 + i).String(), TimeUS: int64(1 + i)})
	}
	if _, err := w.store.ApplyBatch(ctx, &feeds.Batch{Changes: changes, Cursor: feeds.StreamCursor{TimeUS: 2}}); err != nil {
		t.Fatal(err)
	}
	// v3, a viewer with no follows, follows X on the live stream; the
	// queue never runs the edge. The follow's transaction marks X's
	// listing due, and the retry loop fetches and merges it.
	if err := w.svc.Ensure(ctx, v3, "following", "c3"); err != nil {
		t.Fatal(err)
	}
	follow := feeds.Change{
		DID: v3, Collection: followNSID, RKey: tid(3), Op: feeds.OpCreate, Rev: tid(200).String(),
		CID: "bafyfollow", Subject: x, TimeUS: 3,
		Record: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q}`, x)),
	}
	if _, err := w.store.ApplyBatch(ctx, &feeds.Batch{Changes: []feeds.Change{follow}, Cursor: feeds.StreamCursor{TimeUS: 3}}); err != nil {
		t.Fatal(err)
	}
	w.advance(time.Minute)
	w.svc.retryDue(ctx)
	if got := w.page(t, v3, 10); len(got) != 1 {
		st, _ := w.store.ReadListing(ctx, x, postNSID)
		t.Errorf("v3's feed after the retry loop = %v, want X's post; X's listing %+v", got, st)
	}
}

// A listing that once failed as gone was cleared of gone only on
// completion. A reactivated account whose listing wrote its first page
// (gone carried over) and was then cut off by its owner's context (a run
// timeout, which leaves it due at once) stayed gone: DueListings skipped
// it, so the retry loop never merged it, though the account answered
// (found by a review of the fix that clears it on completion).
func TestAListingCutOffAfterAPageOfAReactivatedAccountIsNotGone(t *testing.T) {
	w := newWorld(t, Config{Depth: 150, RetryBase: time.Minute})
	ctx := context.Background()
	v, x := w.account("v"), w.account("x")
	w.follow(v, x, 1)
	for i := range 150 {
		w.post(x, 10+i)
	}
	w.pds.FailN(x, postNSID, pdstest.FaultRepoDeactivated, 1)
	if err := w.svc.Ensure(ctx, v, "following", "c"); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.store.ReadListing(ctx, x, postNSID); !st.Gone {
		t.Fatalf("setup: listing %+v, want gone", st)
	}
	w.advance(time.Hour)

	// Reactivated. The retry (or a first read) lists page 1, and its
	// context ends while page 2 is asked for.
	runCtx, cancel := context.WithCancel(ctx)
	var once sync.Once
	w.gate.Store(func(r *http.Request) {
		q := r.URL.Query()
		if q.Get("repo") == string(x) && q.Get("collection") == string(postNSID) && q.Get("cursor") != "" {
			once.Do(cancel)
			<-r.Context().Done()
		}
	})
	err := w.svc.ensureAccount(runCtx, x, postNSID)
	w.gate.Store(func(*http.Request) {})
	if err == nil {
		t.Fatal("setup: the listing was not cut off")
	}
	st, _ := w.store.ReadListing(ctx, x, postNSID)
	if st.Page == 0 {
		t.Fatalf("setup: no page written: %+v", st)
	}
	due, err := w.store.DueListings(ctx, w.advance(time.Minute), 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	if st.Gone || len(due) != 1 {
		t.Errorf("an account that just answered a page is still gone=%v (%+v); due listings %v, want X's", st.Gone, st, due)
	}
}
