package appview

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
		if got := in.full(tc.n, tc.queued, 0); got != tc.want {
			t.Errorf("full(%d, queued %d) = %v, want %v", tc.n, tc.queued, got, tc.want)
		}
	}
	off := &ingester{batchSize: 100, catchupSize: 0}
	if !off.full(100, 5000, 0) {
		t.Error("catchup_batch_size 0 must leave batches at batch_size")
	}
}

// A batch holding maxBatchBytes of records is flushed whatever its count.
func TestBatchIsBoundedInBytes(t *testing.T) {
	in := &ingester{batchSize: 100, catchupSize: 1000}
	if in.full(10, 5000, maxBatchBytes-1) {
		t.Error("flushed below the byte bound and batch_size")
	}
	if !in.full(10, 5000, maxBatchBytes) {
		t.Error("a batch at the byte bound was not flushed")
	}
}

// A live batch flushes at batch_size; with events queued behind it a
// catch-up batch grows to catchup_batch_size.
func TestCatchupBatchesGrowToTheCatchupSize(t *testing.T) {
	in := &ingester{batchSize: 100, catchupSize: 30_000}
	if !in.full(30_000, 5000, 0) || in.full(29_999, 5000, 0) {
		t.Error("a catch-up batch does not flush at catchup_batch_size")
	}
	if in.full(99, 0, 0) || !in.full(100, 0, 0) {
		t.Error("a live batch does not flush at batch_size")
	}
}

// A backlog already queued is applied in catch-up sized transactions, a
// trickle at batch_size, and every event lands either way.
func TestIngesterCommitsABacklogInLargeBatches(t *testing.T) {
	ctx := context.Background()
	store := openIndexAllStore(t)

	const backlog = 2500
	events := queuedPosts(backlog, shortPost)
	var sizes []int
	runCtx, cancel := context.WithCancel(ctx)
	consumed := 0
	in := &ingester{
		store: store, batchSize: 100, catchupSize: 1000, batchInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: time.Now,
		consumed: func(*jetstream.Event) { consumed++ },
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
	// Every event taken off the queue is reported, so the consumer's byte
	// bound on the queue is given back (jetstream.Config.QueueBytes).
	if consumed != backlog {
		t.Errorf("%d events reported consumed, want %d", consumed, backlog)
	}
}

// At shutdown the ingester commits the batch it holds and at most
// batch_size more of what is queued: a catch-up backlog in the queue is
// left to the next start's replay, so a stop does not wait for it.
func TestAStoppingIngesterLeavesTheQueuedBacklog(t *testing.T) {
	ctx := context.Background()
	store := openIndexAllStore(t)

	const backlog = 2500
	events := queuedPosts(backlog, shortPost)
	var sizes []int
	runCtx, cancel := context.WithCancel(ctx)
	in := &ingester{
		store: store, batchSize: 100, catchupSize: 1000, batchInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: time.Now,
		afterCommit: func(res feeds.BatchResult) {
			sizes = append(sizes, res.Applied)
			cancel() // the daemon stops during the first catch-up batch
		},
	}
	if err := in.Run(runCtx, events); err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 2 || sizes[0] != 1000 || sizes[1] != 100 {
		t.Fatalf("batch sizes %v, want the catch-up batch of 1000, then 100 at the stop", sizes)
	}
	if got := store.Cursor().TimeUS; got != t0+1099 {
		t.Errorf("cursor %d after the stop, want %d (the events committed, no further)", got, t0+1099)
	}
	if left := len(events); left != backlog-1100 {
		t.Errorf("%d events left queued, want %d", left, backlog-1100)
	}
}

// shortPost is a post record of a few bytes.
var shortPost = json.RawMessage(`{"$type":"app.bsky.feed.post","text":"hi","createdAt":"2026-01-01T00:00:00Z"}`)

// queuedPosts is a queue holding n post creates, one a microsecond from
// t0, by 50 authors in turn, each carrying record.
func queuedPosts(n int, record json.RawMessage) chan jetstream.Event {
	events := make(chan jetstream.Event, n)
	for i := range n {
		us := t0 + int64(i)
		events <- jetstream.Event{
			DID: syntax.DID(fmt.Sprintf("did:plc:author%020d", i%50)), TimeUS: us, Kind: jetstream.KindCommit,
			Commit: &jetstream.Commit{
				Operation: jetstream.OpCreate, Collection: postNSID,
				RKey: syntax.RecordKey(syntax.NewTID(us, 0)), Rev: string(syntax.NewTID(us, 0)),
				CID: "bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y", Record: record,
			},
		}
	}
	return events
}

func total(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}

// An identity event reaches the directory with the handle it names, so the
// directory forgets that handle's cached resolution too
// (directory.PurgeIdentity).
func TestIngesterPassesAnIdentityEventsHandle(t *testing.T) {
	ctx := context.Background()
	store := openIndexAllStore(t)
	events := make(chan jetstream.Event, 2)
	events <- jetstream.Event{DID: "did:plc:bob234567abcdefghijklmno", TimeUS: t0, Kind: jetstream.KindIdentity,
		Identity: &jetstream.Identity{Handle: "shared.test"}}
	events <- jetstream.Event{DID: "did:plc:carol34567abcdefghijklmn", TimeUS: t0 + 1, Kind: jetstream.KindIdentity,
		Identity: &jetstream.Identity{}}
	type call struct{ did, handle string }
	var calls []call
	runCtx, cancel := context.WithCancel(ctx)
	in := &ingester{
		store: store, batchSize: 100, batchInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: time.Now,
		identityChanged: func(did syntax.DID, handle string) {
			calls = append(calls, call{string(did), handle})
			if len(calls) == 2 {
				cancel()
			}
		},
	}
	if err := in.Run(runCtx, events); err != nil {
		t.Fatal(err)
	}
	want := []call{{"did:plc:bob234567abcdefghijklmno", "shared.test"}, {"did:plc:carol34567abcdefghijklmn", ""}}
	if !slices.Equal(calls, want) {
		t.Fatalf("identityChanged calls %v, want %v", calls, want)
	}
}

// A batch is flushed once its records reach maxBatchBytes, whatever its
// count: the ingester counts each event's record bytes (a review removed
// the counting and every test still passed, TestBatchIsBoundedInBytes
// checking only the predicate).
func TestIngesterFlushesABatchAtItsByteBound(t *testing.T) {
	ctx := context.Background()
	store := openIndexAllStore(t)
	const n, size = 600, 65_000
	record := json.RawMessage(`{"$type":"app.bsky.feed.post","text":"` + strings.Repeat("a", size-40) + `"}`)
	events := queuedPosts(n, record)
	var sizes []int
	runCtx, cancel := context.WithCancel(ctx)
	in := &ingester{
		store: store, batchSize: 100, catchupSize: 30_000, batchInterval: time.Hour,
		log: slog.New(slog.DiscardHandler), sweepIdle: time.Hour, now: time.Now,
		afterCommit: func(res feeds.BatchResult) {
			sizes = append(sizes, res.Applied)
			cancel() // the rest, under batch_size, is flushed as Run stops
		},
	}
	if err := in.Run(runCtx, events); err != nil {
		t.Fatal(err)
	}
	perBatch := (maxBatchBytes + len(record) - 1) / len(record)
	if len(sizes) != 2 || sizes[0] != perBatch || total(sizes) != n {
		t.Fatalf("batch sizes %v, want the first at %d events (%d bytes each, bound %d)", sizes, perBatch, len(record), maxBatchBytes)
	}
}

// openIndexAllStore opens a store in index_all mode with one feed of
// posts, closed when the test ends.
func openIndexAllStore(t *testing.T) *feeds.Store {
	t.Helper()
	return openIndexAllStoreAt(t, t.TempDir()+"/appview.db")
}

// openIndexAllStoreAt is openIndexAllStore at path.
func openIndexAllStoreAt(t *testing.T, path string) *feeds.Store {
	t.Helper()
	return openIndexAllStoreWith(t, path, func(*feeds.Options) {})
}

// openIndexAllStoreWith is openIndexAllStoreAt with options of the test's
// own (sweep pace, WAL threshold) set by tweak.
func openIndexAllStoreWith(t *testing.T, path string, tweak func(*feeds.Options)) *feeds.Store {
	t.Helper()
	opts := feeds.Options{
		Path: path, IndexAll: true,
		Feeds: []feeds.Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
			Targets: []feeds.Target{{Collection: postNSID, Cap: 200}}}},
	}
	tweak(&opts)
	store, err := feeds.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// An account event's relay time and sequence number reach the store,
// which orders the account's status changes by them
// (feeds.AccountStatus.RelayTimeUS); a missing time stays 0, not the zero
// time's negative microseconds.
func TestAnAccountEventCarriesItsRelayTime(t *testing.T) {
	relay := time.Date(2024, 9, 5, 6, 11, 4, 870_000_000, time.UTC)
	var b feeds.Batch
	for _, at := range []time.Time{relay, {}} {
		addEvent(&b, &jetstream.Event{DID: "did:plc:carol34567abcdefghijklmn", TimeUS: t0, Kind: jetstream.KindAccount,
			Account: &jetstream.Account{Status: "deactivated", Time: at, Seq: 12}})
	}
	if len(b.Accounts) != 2 || b.Accounts[0].RelayTimeUS != relay.UnixMicro() || b.Accounts[1].RelayTimeUS != 0 ||
		b.Accounts[0].TimeUS != t0 || b.Accounts[0].RelaySeq != 12 {
		t.Fatalf("accounts = %+v, want relay times %d and 0, seq 12", b.Accounts, relay.UnixMicro())
	}
}
