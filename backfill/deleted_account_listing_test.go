package backfill

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// atSecondPage runs f once, when the listing of who's collection asks
// for its second page: after its first page was committed, before the
// second is fetched and written.
func (w *world) atSecondPage(who syntax.DID, coll syntax.NSID, f func()) {
	var once sync.Once
	w.gate.Store(func(r *http.Request) {
		q := r.URL.Query()
		if q.Get("repo") == string(who) && q.Get("collection") == string(coll) && q.Get("cursor") != "" {
			once.Do(f)
		}
	})
}

// deleteAccount commits who's deletion, an account event as the stream
// delivers it.
func (w *world) deleteAccount(t *testing.T, who syntax.DID, timeUS int64) {
	if _, err := w.store.ApplyBatch(context.Background(), &feeds.Batch{
		Accounts: []feeds.AccountStatus{{DID: who, Status: "deleted", TimeUS: timeUS}},
		Cursor:   feeds.StreamCursor{TimeUS: timeUS}}); err != nil {
		t.Error(err)
	}
}

// reactivateAccount commits who's return, an account event as the stream
// delivers it.
func (w *world) reactivateAccount(t *testing.T, who syntax.DID, timeUS int64) {
	if _, err := w.store.ApplyBatch(context.Background(), &feeds.Batch{
		Accounts: []feeds.AccountStatus{{DID: who, Active: true, TimeUS: timeUS}},
		Cursor:   feeds.StreamCursor{TimeUS: timeUS}}); err != nil {
		t.Error(err)
	}
}

// listXDuring runs the first read of v, who follows x, which lists x's
// 150 posts in two pages; during runs once at the second page, after the
// first was committed. It returns x's listing and the posts stored then.
func listXDuring(t *testing.T, during func(w *world, x syntax.DID)) (w *world, v, x syntax.DID, st feeds.Listing, stored int64) {
	t.Helper()
	ctx := context.Background()
	w = newWorld(t, Config{Depth: 150})
	v, x = w.account("v"), w.account("x")
	w.follow(v, x, 1)
	for i := range 150 {
		w.post(x, 10+i)
	}
	w.atSecondPage(x, postNSID, func() { during(w, x) })
	if err := w.svc.Ensure(ctx, v, "following", "c"); err != nil {
		t.Fatal(err)
	}
	st, err := w.store.ReadListing(ctx, x, postNSID)
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.store.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return w, v, x, st, c.Targets
}

// An account is deleted while a listing of its posts runs: the deletion
// removes its records and its listing. The listing's next page, whether
// the PDS still answered it (fetched before the PDS deleted the repo) or
// answered "Could not find repo", must store neither again. The page used
// to write its records and the listing state mid-round, as if the account
// were there; the failure wrote the listing back at its cursor, a cursor
// past rows no longer stored (found by a review).
func TestAListingOfAnAccountDeletedWhileItRunsStoresNothingMore(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pdsDeletes bool
	}{
		{"the PDS still answers the next page", false},
		{"the PDS has deleted the repo", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _, x, st, stored := listXDuring(t, func(w *world, x syntax.DID) {
				w.deleteAccount(t, x, 5)
				if tc.pdsDeletes {
					w.pds.DeleteRepo(x)
				}
			})
			if got := w.pds.Requests(x, postNSID); got != 2 {
				t.Fatalf("setup: x's posts were asked for %d times, want 2 pages", got)
			}
			if st != (feeds.Listing{AccountDeleted: true, Deletions: 1}) || stored != 0 {
				t.Errorf("after x's deletion its listing stored %d of its posts again, and its listing %+v; want neither",
					stored, st)
			}
			// Operators see the run end as one whose repo is gone.
			runs, err := w.store.RecentSyncRuns(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				if r.Subject == string(x) && r.Outcome != "gone" {
					t.Errorf("x's listing run ended %q (%s), want gone", r.Outcome, r.Error)
				}
			}
		})
	}
}

// An account is deleted and reactivated while a listing of its posts
// runs. The deleted mark is gone by the run's next page, and the page used
// to store its records and position: the listing ended complete holding
// only the pages after the deletion, which had removed the earlier ones
// (found by a review of schema 0016). The deletion count tells the run,
// which lists the account afresh.
func TestAListingOfAnAccountDeletedAndReactivatedWhileItRunsListsItAfresh(t *testing.T) {
	w, v, x, st, stored := listXDuring(t, func(w *world, x syntax.DID) {
		w.deleteAccount(t, x, 5)
		w.reactivateAccount(t, x, 6)
	})
	if got := w.pds.Requests(x, postNSID); got != 4 {
		t.Fatalf("x's posts were asked for %d times, want 2 pages, then 2 of a fresh round", got)
	}
	if !st.Complete || st.Fetched != 150 || st.Deletions != 1 || stored != 150 {
		t.Errorf("listing %+v with %d posts stored; want a complete round of all 150 under the new deletion count", st, stored)
	}
	if feed := w.page(t, v, 200); len(feed) != 150 {
		t.Errorf("v's feed holds %d of x's posts, want 150", len(feed))
	}
}

// A viewer deletes its account while its first read lists its follows.
// The follow listing's next page must not store the deleted account's
// follows again: they used to come back with the listing, put their
// accounts in scope, and the first read went on to list those accounts
// and build the deleted account a feed.
func TestAFollowListingOfAViewerDeletedWhileItRunsStoresNothingMore(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	v := w.account("v")
	for i := range 150 {
		a := w.account(fmt.Sprint("a", i))
		w.follow(v, a, i)
		w.post(a, 1000+i)
	}
	w.atSecondPage(v, followNSID, func() { w.deleteAccount(t, v, 5) })
	if err := w.svc.Ensure(ctx, v, "following", "c"); err != nil {
		t.Fatal(err)
	}
	if got := w.pds.Requests(v, followNSID); got < 2 {
		t.Fatalf("setup: v's follows were asked for %d times, want 2 pages at least", got)
	}
	st, err := w.store.ReadListing(ctx, v, followNSID)
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.store.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if feed := w.page(t, v, 200); st != (feeds.Listing{AccountDeleted: true, Deletions: 1}) || c.Follows != 0 || len(feed) != 0 {
		t.Errorf("after v's deletion its follow listing stored %d follows again, its listing %+v, and a feed of %d posts; want none",
			c.Follows, st, len(feed))
	}
}

// A deleted account's listing stores nothing (ApplyListingPage,
// FailListing), so nothing stored says it is gone: each first read of a
// viewer who follows it asked its PDS again (found by a review). The
// stored deletion says it.
func TestADeletedAccountIsNotListedAgainByFirstReads(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	x := w.account("x")
	w.post(x, 10)
	v0 := w.account("v0")
	w.follow(v0, x, 1)
	if err := w.svc.Ensure(ctx, v0, "following", "c"); err != nil {
		t.Fatal(err)
	}
	w.deleteAccount(t, x, 5)
	w.pds.DeleteRepo(x)
	before := w.pds.Requests(x, postNSID)
	for i := range 5 {
		v := w.account(fmt.Sprint("v", i+1))
		w.follow(v, x, 1)
		if err := w.svc.Ensure(ctx, v, "following", "c"); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.pds.Requests(x, postNSID) - before; got != 0 {
		t.Errorf("deleted x's listing fetched %d times by 5 first reads, want none", got)
	}
}
