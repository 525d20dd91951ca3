package xrpc

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// stuckFor is how long the stuck stand-ins below wait, at most, for their
// context to end: past the test's write timeout, so a handler that
// waited for them answers too late, and the test fails instead of hanging.
const stuckFor = 2 * time.Second

// stuck waits for ctx to end, or stuckFor.
func stuck(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(stuckFor):
		return errors.New("still stuck")
	}
}

// stuckReader is a page read queued behind a saturated read pool: it
// returns when its context ends, and says whether it had a deadline.
type stuckReader struct{ deadline chan bool }

func (r stuckReader) ReadFeed(ctx context.Context, _ feeds.PageQuery) (feeds.Page, error) {
	_, ok := ctx.Deadline()
	r.deadline <- ok
	return feeds.Page{}, stuck(ctx)
}

// stuckProfiles is the same for the profiles' hydration.
type stuckProfiles struct{}

func (stuckProfiles) Hydrate(ctx context.Context, _ []syntax.DID) ([]feeds.Profile, error) {
	return nil, stuck(ctx)
}

// A getFeed's page read and its profiles are cut off while the response
// can still be written: the server's write timeout cancels nothing, so a
// read stuck behind a saturated read pool used to hold its handler until
// the client hung up, and the client, its connection dropped at the write
// timeout, got no answer. It now gets 503 NotEnoughResources with
// Retry-After within the write timeout.
func TestAPageReadThatRunsOutOfTimeIsA503(t *testing.T) {
	const write = 400 * time.Millisecond
	for _, tc := range []struct {
		name    string
		reader  FeedReader
		query   string
		stuckIn string
	}{
		{"page read", stuckReader{deadline: make(chan bool, 1)}, "", "read"},
		{"profiles", goldenReader(), "&profiles=true", "hydrate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(tc.reader)
			cfg.Profiles = stuckProfiles{}
			cfg.Timeouts = Timeouts{Write: write}
			base := serve(t, cfg)
			start := time.Now()
			res := get(t, &http.Client{Timeout: 2 * stuckFor}, base+getFeedURL+"?feed=following&actor="+string(alice)+tc.query)
			took := time.Since(start)
			if res.Status != http.StatusServiceUnavailable || decodeEnvelope(t, res.Body).Error != "NotEnoughResources" || res.Header.Get("Retry-After") != "1" {
				t.Fatalf("%d %s (Retry-After %q), want 503 NotEnoughResources, Retry-After 1", res.Status, res.Body, res.Header.Get("Retry-After"))
			}
			if took >= write {
				t.Fatalf("answered after %s, not within the write timeout %s", took, write)
			}
			if r, ok := tc.reader.(stuckReader); ok && !<-r.deadline {
				t.Fatal("the page read's context had no deadline")
			}
		})
	}
}
