package backfill

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// TestACommandRefusedForChangedFeedsCountsNoAttempt: an operator's
// `appview backfill` whose first read the store refuses because the
// daemon restarted with other feeds while it ran (feeds.ErrFeedsDiffer)
// records no failed attempt and gives its claim back: nothing about the
// viewer failed, and the daemon's next read of it runs at once.
func TestACommandRefusedForChangedFeedsCountsNoAttempt(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	viewer, alice := w.account("viewer"), w.account("alice")
	w.follow(viewer, alice, 1)
	w.post(alice, 10)

	postsOnly := []feeds.Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []feeds.Target{{Collection: postNSID, Cap: 200}}}}
	cmdStore, err := feeds.Open(ctx, feeds.Options{Path: w.path, Feeds: postsOnly, Existing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cmdStore.Close()
	cmd := New(w.svc.cfg, cmdStore, w.svc.resolver, w.svc.pds,
		[]Feed{{Name: "following", FollowCollection: followNSID, Targets: []syntax.NSID{postNSID}}}, nil, nil)

	// While the command lists the viewer's follows, the daemon restarts
	// with reposts added to the feed.
	var once sync.Once
	w.gate.Store(func(r *http.Request) {
		if r.URL.Query().Get("repo") != string(viewer) {
			return
		}
		once.Do(func() {
			both := []feeds.Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
				Targets: []feeds.Target{{Collection: postNSID, Cap: 200}, {Collection: "app.bsky.feed.repost", Cap: 200}}}}
			d, err := feeds.Open(ctx, feeds.Options{Path: w.path, Feeds: both})
			if err != nil {
				t.Error(err)
				return
			}
			d.Close()
		})
	})
	_, err = cmd.RunFirstRead(ctx, viewer, "following", nil)
	if !errors.Is(err, feeds.ErrFeedsDiffer) {
		t.Fatalf("command's first read: %v, want ErrFeedsDiffer", err)
	}
	st, err := w.store.RegisterViewer(ctx, viewer, "following", w.clock.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if st.Complete || st.Attempts != 0 || !st.NextRetry.IsZero() {
		t.Errorf("after the refusal: complete %v, attempts %d, next retry %v; want pending, no attempt, no wait",
			st.Complete, st.Attempts, st.NextRetry)
	}
	claimed, err := w.store.ClaimFirstRead(ctx, viewer, "following", "daemon", w.clock.Add(time.Second), time.Minute)
	if err != nil || !claimed {
		t.Errorf("the daemon could not claim the viewer's first read at once: %v %v", claimed, err)
	}
}
