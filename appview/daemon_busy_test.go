package appview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/syncbuf"
	"github.com/atfeeds/appview/internal/writelock"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// An operator command beside the daemon (a rebuild's chunk, a backfill's
// page) may hold the write lock longer than the daemon's busy timeout.
// The ingest batch that could not begin is tried again, and the daemon
// goes on, where it used to stop with "database is locked" (found by a
// review of the operator commands).
func TestIngestWaitsOutAWriteLockHeldElsewhere(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	path := t.TempDir() + "/appview.db"
	td := startDaemon(t, js, testConfig(t, js, path))

	release := writelock.Hold(t, path)
	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1),
		jetstreamtest.Post(user("carol"), "p1", t0+2, "written while the lock was held elsewhere"),
	)
	// Past the busy timeout (5 s): the batch's begin has failed at least once.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(td.metrics(t), "appview_database_write_busy_total 1") {
		if time.Now().After(deadline) {
			t.Fatal("the daemon never found the write lock busy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	release()
	td.waitCursor(t, t0+2)
	if got := td.feed(t, user("alice")); !slices.Equal(got, []string{"p1"}) {
		t.Errorf("alice = %v, want [p1]", got)
	}
}

// While a batch waits (here for a write lock held elsewhere; a long
// catch-up batch is the usual cause) the consumer's queue fills and its
// read loop, which answers the server's pings, waits on it. After 3 s the
// consumer steps away from the connection and, once the batch is through,
// redials from the newest event it handed over: every event lands, and
// what the redial replays changes nothing.
func TestTheConsumerStepsAwayWhileABatchWaitsAndLosesNothing(t *testing.T) {
	t.Parallel()
	js := jetstreamtest.NewServer()
	defer js.Close()
	path := t.TempDir() + "/appview.db"
	cfg := testConfig(t, js, path)
	cfg.Jetstream.QueueSize = 8
	td := startDaemon(t, js, cfg)
	js.Append(jetstreamtest.Follow(followNSID, user("alice"), "f0", user("carol"), t0))
	td.waitCursor(t, t0) // the session has made progress: it may step away

	release := writelock.Hold(t, path)
	const posts = 100
	var want []string
	for i := posts; i >= 1; i-- {
		want = append(want, fmt.Sprintf("p%03d", i)) // newest first
	}
	post := func(i int) []byte {
		return jetstreamtest.Post(user("carol"), fmt.Sprintf("p%03d", i), t0+int64(i), "queued behind a waiting batch")
	}
	// The first post alone, so that its batch (flushed 5 ms after it, by
	// the batch interval) is the one waiting when the rest arrive; sent
	// together, the ingester could take them all into that batch first,
	// and the queue would never fill.
	js.Append(post(1))
	time.Sleep(200 * time.Millisecond)
	for i := 2; i <= posts; i++ {
		js.Append(post(i))
	}
	deadline := time.Now().Add(20 * time.Second)
	for td.metricValue(t, "appview_jetstream_step_aways_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the consumer never stepped away from its connection")
		}
		time.Sleep(50 * time.Millisecond)
	}
	release()
	td.waitCursor(t, t0+posts)
	if n := len(js.Queries()); n < 2 {
		t.Fatalf("%d subscriptions, want a redial after stepping away", n)
	}
	if got := td.feed(t, user("alice")); !slices.Equal(got, want) {
		t.Errorf("alice's feed holds %d posts %v…, want all %d once", len(got), got[:min(len(got), 5)], posts)
	}
}

// A session's record (sync_runs) is written on a goroutine of its own:
// a redial used to wait for it, and with the write lock held by another
// process that was the busy timeout (5 s) at every reconnect, the stream
// idle meanwhile (left as found by an earlier session).
func TestAReconnectDoesNotWaitForTheSessionRecord(t *testing.T) {
	t.Parallel()
	js := jetstreamtest.NewServer()
	defer js.Close()
	js.DropEvery(1) // read by each connection as it opens
	path := t.TempDir() + "/appview.db"
	td := startDaemon(t, js, testConfig(t, js, path))
	release := writelock.Hold(t, path) // its cleanup ends it if the test fails first
	before := len(js.Queries())
	js.Append(jetstreamtest.Post(user("carol"), "p1", t0+1, "then the connection drops"))
	if !js.WaitConnections(before+1, 2*time.Second) {
		t.Fatal("no redial within 2 s of a dropped connection while the write lock was held elsewhere")
	}
	release()
	td.waitCursor(t, t0+1)
}

// notifyOfUpdate whose write waits past its time for a write lock held
// elsewhere answers 503 with Retry-After, not a 500 that says the daemon
// is broken (raised by a review of notify); the app's retry is
// idempotent.
func TestNotifyAnswers503WhenTheWriteLockIsHeldElsewhere(t *testing.T) {
	n := newNetwork(t)
	alice, carol := n.account("alice"), n.account("carol")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	cfg := n.config(t)
	cfg.Notify = NotifyConfig{Enabled: true, Secret: testNotifySecret}
	td := startDaemon(t, n.js, cfg)
	if got := td.feed(t, alice); len(got) != 0 {
		t.Fatalf("first read = %v", got)
	}
	rk := rkeyAt(time.Now())
	n.pdsPost(carol, rk, time.Now())

	release := writelock.Hold(t, cfg.Database.Path)
	status, body := td.notifyCall(t, testNotifySecret, `{"uri":"`+postURI(carol, rk)+`"}`)
	release()
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "NotEnoughResources") {
		t.Fatalf("notify with the write lock held elsewhere: %d %s, want 503 NotEnoughResources", status, body)
	}
	if res := td.notify(t, postURI(carol, rk)); len(res.Indexed) != 1 {
		t.Fatalf("the retry: %+v", res)
	}
	if got := td.feed(t, alice); !slices.Equal(got, []string{rk}) {
		t.Errorf("alice = %v, want [%s]", got, rk)
	}
}

// A daemon starting on a cursor older than the stream's window records a
// gap before it connects, and the first batch after stores a fresh
// cursor: a gap not recorded then is never seen again. When an operator
// command held the write lock at that moment, RecordGap failed, was only
// logged, and the gap was lost, no viewer rebuilt after 40 h of missed
// stream (found by a review of the stream path). It waits the lock out.
func TestAGapIsRecordedThoughTheWriteLockIsHeldAtConnect(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	path := t.TempDir() + "/appview.db"
	cfg := testConfig(t, js, path)
	cfg.Ingest.IndexAll = false
	ctx := context.Background()
	stale := time.Now().Add(-40 * time.Hour).UnixMicro()
	st, _, err := OpenOrCreateStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	alice := syntax.DID(user("alice"))
	st.RegisterViewer(ctx, alice, "following", time.Now())
	st.ClaimFirstRead(ctx, alice, "following", "x", time.Now(), time.Minute)
	if _, err := st.CompleteFirstRead(ctx, alice, "following", "x", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyBatch(ctx, &feeds.Batch{Cursor: feeds.StreamCursor{TimeUS: stale}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Build(ctx, cfg, Options{Listener: l, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	td := &testDaemon{Daemon: d, base: "http://" + l.Addr().String()}

	// An operator command (rebuild, backfill) holds the write lock.
	release := writelock.Hold(t, path)

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		cancel()
		<-done
		d.Close(ctx)
	}()
	// The gap's write waits the busy timeout (5 s), fails, and waits again.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(td.metrics(t), "appview_database_write_busy_total 1") {
		if time.Now().After(deadline) {
			t.Fatal("the daemon never found the write lock busy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	release()
	if !js.WaitConnections(1, 20*time.Second) {
		t.Fatal("daemon did not subscribe")
	}
	now := time.Now().UnixMicro()
	js.Append(jetstreamtest.Post(user("carol"), "p1", now, "after the gap"))
	td.waitCursor(t, now)

	g, ok, err := td.Store().LastGap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ok || g.CursorUS != stale {
		t.Errorf("no gap recorded for the stale cursor %d (last gap %+v, found %v); the cursor is now %d, so no reconnect will record it",
			stale, g, ok, td.Store().Cursor().TimeUS)
	}
	if !strings.Contains(td.metrics(t), "appview_jetstream_gaps_total 1") {
		t.Error("gap not counted")
	}
	if vs, _ := td.Store().RegisterViewer(ctx, alice, "following", time.Now()); vs.Complete {
		t.Error("viewer alice still complete: not marked for a rebuild after 40 h of missed stream")
	}
}

// A sweep tick that finds the write lock held by another process (an
// operator command's long transaction) is skipped and says so; the
// ingester goes on rather than stopping the daemon.
func TestASweepTickSkipsAForeignWriteLock(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	store := openIndexAllStoreAt(t, path)
	const backlog = 1000
	events := queuedPosts(backlog, shortPost)
	var logs syncbuf.Buffer
	var released sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	in := &ingester{
		store: store, batchSize: 100, catchupSize: 1000,
		batchInterval: time.Hour, sweepIdle: time.Hour, now: time.Now,
		log: slog.New(slog.NewTextHandler(&logs, nil)),
		afterCommit: func(feeds.BatchResult) {
			// Held from the batch's commit until the tick gave up on it.
			release := writelock.Hold(t, path)
			released.Go(func() {
				for !strings.Contains(logs.String(), "sweep tick cut short") {
					time.Sleep(20 * time.Millisecond)
				}
				release()
			})
			cancel()
		},
	}
	err := in.Run(ctx, events)
	released.Wait()
	if err != nil {
		t.Fatalf("Run after a skipped sweep tick: %v", err)
	}
	if got := store.Cursor().TimeUS; got != t0+backlog-1 {
		t.Errorf("cursor %d, want the backlog's last event %d", got, t0+backlog-1)
	}
}

// A new viewer's first getFeed registers it, a write. With the write lock
// held by another process past the busy timeout, that write fails with
// feeds.ErrWriteBusy: nothing is broken, and the read may be asked again.
// It was a 500 InternalServerError, logged as an error, where
// notifyOfUpdate answers the same wait with 503 and Retry-After (found by
// a review of the read path).
func TestGetFeedAnswers503WhenTheWriteLockIsHeldElsewhere(t *testing.T) {
	n := newNetwork(t)
	alice, carol := n.account("alice"), n.account("carol")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	rk := rkeyAt(time.Now().Add(-time.Minute))
	n.pdsPost(carol, rk, time.Now().Add(-time.Minute))
	cfg := n.config(t)
	td := startDaemon(t, n.js, cfg)

	release := writelock.Hold(t, cfg.Database.Path)
	q := "/xrpc/com.example.appview.getFeed?feed=following&actor=" + alice
	resp, err := http.Get(td.base + q)
	release()
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 512)
	nb, _ := resp.Body.Read(body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body[:nb]), "NotEnoughResources") ||
		resp.Header.Get("Retry-After") == "" {
		t.Fatalf("first read with the write lock held elsewhere: %d %s (Retry-After %q), want 503 NotEnoughResources with Retry-After",
			resp.StatusCode, body[:nb], resp.Header.Get("Retry-After"))
	}
	if got := td.feed(t, alice); !slices.Equal(got, []string{rk}) {
		t.Errorf("the retry: alice = %v, want [%s]", got, rk)
	}
}

// A stop that finds the write lock held by another process (an operator's
// rebuild) past its last attempts leaves its open batch uncommitted:
// nothing of it was written and its cursor did not move, so the next
// start replays it. That is a clean stop, not a failure: Run returned the
// busy error, and the daemon exited 1 on SIGTERM (found by a review of
// the run loop).
func TestAStopBehindAForeignWriteLockIsClean(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	store := openIndexAllStoreAt(t, path)
	events := queuedPosts(3, shortPost)
	var logs syncbuf.Buffer
	in := &ingester{
		store: store, batchSize: 100, catchupSize: 1000,
		batchInterval: time.Hour, sweepIdle: time.Hour, now: time.Now,
		log: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	release := writelock.Hold(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the stop: the queued events are the last batch
	if err := in.Run(ctx, events); err != nil {
		t.Errorf("Run stopped behind a foreign write lock: %v, want a clean stop", err)
	}
	release()
	if got := store.Cursor().TimeUS; got != 0 {
		t.Errorf("cursor %d, want none stored", got)
	}
	if !strings.Contains(logs.String(), "replayed at the next start") {
		t.Errorf("the stop did not say its batch was left: %s", logs.String())
	}
}

// A daemon (re)started while an operator command beside it held the
// write lock past the busy timeout (a rebuild chunk of heavy viewers, say)
// failed to start: "sync feeds: database is locked (5) (SQLITE_BUSY)",
// exit 1. It waits the lock out, as its batches do, and lets other
// operator commands in meanwhile; a signal while it waits is a clean stop
// before it started.
func TestAStartBehindAForeignWriteLockWaits(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	path := t.TempDir() + "/appview.db"
	cfg := testConfig(t, js, path)
	st, _, err := OpenOrCreateStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	release := writelock.Hold(t, path)
	built := make(chan error, 1)
	go func() {
		d, err := Build(context.Background(), cfg, Options{Logger: testLogger(t)})
		if err == nil {
			err = d.Close(context.Background())
		}
		built <- err
	}()
	// Between its tries the daemon gives up the operator lock, which it
	// holds for one try at a time: an operator command started meanwhile
	// (cursor show, say) goes on, where it was refused for as long as
	// the foreign lock was held (found by a review of the operator lock).
	deadline := time.Now().Add(10 * time.Second)
	for advisoryLocks {
		l, held, err := tryLock(path, opsLockSuffix, false)
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			break // the daemon's first try holds it
		}
		l.release()
		select {
		case err := <-built:
			t.Fatalf("Build returned before it took the operator lock: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon's start never took the operator lock")
		}
	}
	command, err := lockAsOperator(context.Background(), path, operatorLockWait)
	if err != nil {
		t.Fatalf("an operator command while the start waits: %v", err)
	}
	command.release()
	select {
	case err := <-built:
		t.Fatalf("Build returned while the lock was held: %v", err)
	case <-time.After(6 * time.Second): // past the busy timeout
	}
	release()
	select {
	case err := <-built:
		if err != nil {
			t.Fatalf("Build after the lock was released: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Build did not return after the lock was released")
	}

	release = writelock.Hold(t, path)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	if _, err := Build(ctx, cfg, Options{Logger: testLogger(t)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Build stopped while waiting for the lock: %v, want context.Canceled", err)
	}
}
