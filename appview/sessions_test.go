package appview

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/syncbuf"
	"github.com/atfeeds/appview/internal/writelock"
	"github.com/atfeeds/appview/jetstream"
)

// A session that ends while a long batch holds the store's writer (a
// step-away ends one exactly then, and a catch-up batch at 100,000 viewers
// takes tens of seconds) is still recorded once the batch is through. The
// record's write used to be given 10 s counted from when the log took it
// up, its wait for the writer included, and was dropped past them.
func TestASessionEndedDuringALongBatchIsStillRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := openIndexAllStore(t)
	// One account whose follows are stored: a rebuild in index_all mode
	// has a viewer to rebuild, in a write transaction.
	rev := syntax.NewTID(t0, 0).String()
	if _, err := store.ApplyBatch(ctx, &feeds.Batch{
		Changes: []feeds.Change{{DID: syntax.DID(user("alice")), Collection: followNSID, RKey: "f1", Op: feeds.OpCreate,
			Rev: rev, CID: "bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y",
			Record:  json.RawMessage(`{"$type":"app.bsky.graph.follow","subject":"did:plc:carol","createdAt":"2026-01-01T00:00:00Z"}`),
			Subject: syntax.DID(user("carol")), TimeUS: t0}},
		Cursor: feeds.StreamCursor{TimeUS: t0}}); err != nil {
		t.Fatal(err)
	}

	// The long batch: a rebuild whose clock, read inside its write
	// transaction, waits until released.
	const hold = 11 * time.Second // past the 10 s the record was given
	held, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	rebuilt := make(chan error, 1)
	go func() {
		_, err := store.RebuildFeed(ctx, "following", feeds.RebuildOptions{Now: func() time.Time {
			if calls.Add(1) == 2 { // the first is read before the transaction
				close(held)
				<-release
			}
			return time.Now()
		}})
		rebuilt <- err
	}()
	<-held

	log := newSessionLog(store, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() { log.Run(); close(done) }()
	now := time.Now()
	log.add(jetstream.SessionReport{Host: "wss://js.example", Connected: now.Add(-time.Minute), Disconnected: now,
		Delivered: 7, Reason: "stepped away while the caller's queue was full"})
	time.Sleep(hold)
	close(release)
	if err := <-rebuilt; err != nil {
		t.Fatal(err)
	}
	log.close()
	<-done

	runs, err := store.RecentSyncRuns(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.Kind == "jetstream" && r.Subject == "wss://js.example" && r.Written == 7 {
			return
		}
	}
	t.Errorf("the session that ended during a %s batch was not recorded: sync runs %+v", hold, runs)
}

// With the write lock held by another process past the busy timeout, a
// report's write fails after 5 s, and so would each report queued behind
// it: a stop, which drains the backlog, waited that long for every one.
// The first such failure drops the reports queued with it.
func TestSessionReportsBehindAForeignLockAreDroppedTogether(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/appview.db"
	store := openIndexAllStoreAt(t, path)
	var logs syncbuf.Buffer
	l := newSessionLog(store, slog.New(slog.NewTextHandler(&logs, nil)))
	release := writelock.Hold(t, path)
	defer release()
	for i := range 3 {
		l.add(jetstream.SessionReport{Host: "ws://jetstream.test/subscribe", Connected: time.Now(), Disconnected: time.Now(), Delivered: i})
	}
	l.close()
	start := time.Now()
	l.Run()
	if took := time.Since(start); took > 9*time.Second {
		t.Errorf("the queued reports took %v to give up on, one busy timeout (5 s) each", took.Round(time.Second))
	}
	if !strings.Contains(logs.String(), "dropped=2") {
		t.Errorf("the two reports behind the failed one are not said to be dropped: %s", logs.String())
	}
}
