package appview

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
)

func TestBatchGrowsOnlyWhileEventsAreQueued(t *testing.T) {
	in := &ingester{batchSize: 100, catchupSize: 1000}
	for _, tc := range []struct {
		n, queued int
		want      bool
	}{
		{99, 0, false},    // below batch_size: wait for more or the timer
		{99, 5000, false}, // likewise, however much is queued
		{100, 0, true},    // live: flush at batch_size
		{100, 1, false},   // catching up: keep growing
		{999, 5000, false},
		{1000, 5000, true}, // catch-up bound
	} {
		if got := in.full(tc.n, tc.queued); got != tc.want {
			t.Errorf("full(%d, queued %d) = %v, want %v", tc.n, tc.queued, got, tc.want)
		}
	}
	off := &ingester{batchSize: 100, catchupSize: 0}
	if !off.full(100, 5000) {
		t.Error("catchup_batch_size 0 must leave batches at batch_size")
	}
}

// A backlog already queued is applied in catch-up sized transactions, a
// trickle at batch_size, and every event lands either way.
func TestIngesterCommitsABacklogInLargeBatches(t *testing.T) {
	ctx := context.Background()
	store, err := feeds.Open(ctx, feeds.Options{
		Path:     t.TempDir() + "/appview.db",
		IndexAll: true,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
			Targets: []feeds.Target{{Collection: postNSID, Cap: 200}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	const backlog = 2500
	events := make(chan jetstream.Event, backlog)
	for i := range backlog {
		us := t0 + int64(i)
		did := syntax.DID(fmt.Sprintf("did:plc:author%020d", i%50))
		events <- jetstream.Event{
			DID: did, TimeUS: us, Kind: jetstream.KindCommit,
			Commit: &jetstream.Commit{
				Operation: jetstream.OpCreate, Collection: postNSID,
				RKey: syntax.RecordKey(syntax.NewTID(us, 0)), Rev: string(syntax.NewTID(us, 0)),
				CID:    "bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y",
				Record: json.RawMessage(`{"$type":"app.bsky.feed.post","text":"hi","createdAt":"2026-01-01T00:00:00Z"}`),
			},
		}
	}
	var sizes []int
	runCtx, cancel := context.WithCancel(ctx)
	in := &ingester{
		store: store, batchSize: 100, catchupSize: 1000, batchInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: time.Now,
		afterCommit: func(res feeds.BatchResult) {
			sizes = append(sizes, res.Applied)
			if total(sizes) == backlog {
				cancel()
			}
		},
	}
	if err := in.Run(runCtx, events); err != nil {
		t.Fatal(err)
	}
	// The queue held the whole backlog: 1000, 1000, then 500 (the last
	// batch flushes at batch_size steps once the queue runs dry).
	if len(sizes) < 3 || sizes[0] != 1000 || sizes[1] != 1000 {
		t.Fatalf("batch sizes %v, want two catch-up batches of 1000 first", sizes)
	}
	if got := store.Cursor().TimeUS; got != t0+backlog-1 {
		t.Fatalf("cursor %d, want the last event %d", got, t0+backlog-1)
	}
}

func total(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}
