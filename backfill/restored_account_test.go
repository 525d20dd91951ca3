package backfill

import (
	"context"
	"slices"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// viewerFollowingAPoster is a world where viewer v, its first read done,
// follows x, who posted once: want is v's feed.
func viewerFollowingAPoster(t *testing.T) (w *world, v, x syntax.DID, want []string) {
	t.Helper()
	w = newWorld(t, Config{})
	v, x = w.account("v"), w.account("x")
	w.follow(v, x, 1)
	want = []string{string(x) + "/" + string(w.post(x, 10))}
	if err := w.svc.Ensure(context.Background(), v, "following", "c"); err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, v, 10); !slices.Equal(got, want) {
		t.Fatalf("setup: v's feed %v, want %v", got, want)
	}
	return w, v, x, want
}

// An account deleted and then restored gets its posts back in the feeds
// of the viewers who kept following it: the deletion removed its records
// and listings, and only the retry loop, finding its listing due again,
// fetches them from its PDS and merges them. (Before, they never came
// back: left as found by the tenth session's review.)
func TestARestoredAccountsPostsComeBackToItsFollowers(t *testing.T) {
	ctx := context.Background()
	w, v, x, want := viewerFollowingAPoster(t)

	w.deleteAccount(t, x, 5)
	if got := w.page(t, v, 10); len(got) != 0 {
		t.Fatalf("setup: v's feed %v after x was deleted, want it empty", got)
	}
	w.reactivateAccount(t, x, 6)
	w.svc.retryDue(ctx)
	if got := w.page(t, v, 10); !slices.Equal(got, want) {
		t.Errorf("v's feed %v after x was restored and the retry loop ran, want %v", got, want)
	}
}

// A viewer whose account was deleted and restored reads its feed built
// again: the deletion removed its follows and feed, and its restoration
// makes its next read a first read, which lists its follows from its PDS.
// What this process remembers of its complete first read is forgotten
// with the batch that restored it (the daemon passes
// feeds.BatchResult.Restored to ForgetViewers), or the read would be
// served the empty feed for up to an hour.
func TestARestoredViewersFeedIsBuiltAgain(t *testing.T) {
	ctx := context.Background()
	w, v, _, want := viewerFollowingAPoster(t)

	w.deleteAccount(t, v, 5)
	res, err := w.store.ApplyBatch(ctx, &feeds.Batch{
		Accounts: []feeds.AccountStatus{{DID: v, Active: true, TimeUS: 6}},
		Cursor:   feeds.StreamCursor{TimeUS: 6}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Restored, []syntax.DID{v}) {
		t.Fatalf("batch restoring v: Restored %v, want [%s]", res.Restored, v)
	}
	w.svc.ForgetViewers(res.Restored)
	if err := w.svc.Ensure(ctx, v, "following", "c"); err != nil {
		t.Fatal(err)
	}
	if got := w.page(t, v, 10); !slices.Equal(got, want) {
		t.Errorf("restored v's feed %v, want it built again: %v", got, want)
	}
}
