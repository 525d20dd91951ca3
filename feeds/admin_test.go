package feeds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

func TestResetJetstreamIsAdoptedNotOverwritten(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	daemon := mustOpenAt(t, path, defaultFeeds)
	ctx := context.Background()
	if _, err := daemon.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 100, Seq: 9, Host: "wss://a"}}); err != nil {
		t.Fatal(err)
	}
	// The operator's command opens the same file while the daemon runs.
	tool := mustOpenAt(t, path, defaultFeeds)
	e, err := tool.ResetJetstream(ctx, time.UnixMicro(50), "ops", time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if e.Old != "time_us=100 seq=9 host=wss://a generation=0" || e.New != "time_us=50 generation=1" {
		t.Errorf("audit entry %+v", e)
	}
	// The daemon's next commit carries an older generation: refused, and
	// the daemon adopts the reset position instead.
	res, err := daemon.ApplyBatch(ctx, &Batch{Changes: []Change{post("carol", "p1", 200)}, Cursor: StreamCursor{TimeUS: 200}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CursorReset || daemon.Cursor().TimeUS != 50 {
		t.Fatalf("reset not adopted: %+v, cursor %+v", res, daemon.Cursor())
	}
	// From there it moves forward again under the new generation.
	if _, err := daemon.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 60}}); err != nil {
		t.Fatal(err)
	}
	cur, gen, _ := readCursor(ctx, daemon.reader)
	if cur.TimeUS != 60 || gen != 1 {
		t.Errorf("stored cursor %+v generation %d, want 60 at generation 1", cur, gen)
	}
	entries, _ := tool.Audit(ctx, 10)
	if len(entries) != 1 || entries[0].User != "ops" || entries[0].Action != "reset jetstream" {
		t.Errorf("audit = %+v", entries)
	}
}

// On a database no daemon has stored a position in yet (the daemon never
// connected, or appview backfill made it), a reset to a time sets the
// first position: the daemon starts there, and one already running with no
// position adopts it. It used to answer "nothing to reset" and set nothing,
// so the daemon started at the live tip (a review of the docs against the
// code).
func TestResetJetstreamToATimeSetsTheFirstPosition(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	daemon := mustOpenAt(t, path, defaultFeeds)
	ctx := context.Background()
	scope := []string{string(followNSID), string(postNSID)}
	if change, err := daemon.CheckScope(ctx, scope); err != nil || change != nil {
		t.Fatalf("the daemon's scope: %+v, %v", change, err)
	}
	tool := mustOpenAt(t, path, defaultFeeds)
	e, err := tool.ResetJetstream(ctx, time.UnixMicro(50), "ops", time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if e.Old != "none" || e.New != "time_us=50 generation=1" {
		t.Errorf("audit entry %+v", e)
	}
	if entries, _ := tool.Audit(ctx, 10); len(entries) != 1 {
		t.Errorf("audit = %+v, want the reset", entries)
	}
	// A daemon opened now starts from it.
	later := mustOpenAt(t, path, defaultFeeds)
	if c := later.Cursor(); c.TimeUS != 50 {
		t.Errorf("a daemon opened after the reset starts at %+v, want time 50", c)
	}
	// The daemon that was running with no position adopts it at its next
	// commit instead of storing the live tip it read from.
	res, err := daemon.ApplyBatch(ctx, &Batch{Changes: []Change{post("carol", "p1", 200)}, Cursor: StreamCursor{TimeUS: 200}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CursorReset || daemon.Cursor().TimeUS != 50 {
		t.Fatalf("reset not adopted: %+v, cursor %+v", res, daemon.Cursor())
	}
	if g, found, err := tool.LastGap(ctx); err != nil || found {
		t.Errorf("a first position recorded a gap %+v (%v)", g, err)
	}
	// The position is the daemon's now, taken under its scope: a start
	// that adds a collection sees just that one added (the reset's row
	// carried no scope, and the next start reported every collection
	// added and "" removed).
	next := mustOpenAt(t, path, defaultFeeds)
	change, err := next.CheckScope(ctx, append(scope, "app.example.thing"))
	if err != nil || change == nil || !slices.Equal(change.Added, []string{"app.example.thing"}) || len(change.Removed) != 0 {
		t.Errorf("a start that adds a collection after the reset: %+v, %v; want just it added", change, err)
	}

	// With no daemon running, the first start takes the reset's position
	// under its scope, with nothing to report.
	other := t.TempDir() + "/appview.db"
	if _, err := mustOpenAt(t, other, defaultFeeds).ResetJetstream(ctx, time.UnixMicro(50), "ops", time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if change, err := mustOpenAt(t, other, defaultFeeds).CheckScope(ctx, scope); err != nil || change != nil {
		t.Errorf("a start on the reset's position reports a scope change %+v (%v)", change, err)
	}
}

func TestResetOfNothingRecordsNothing(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	now := time.Unix(1, 0)
	if _, err := s.ResetJetstream(ctx, time.Time{}, "ops", now); !errors.Is(err, ErrNothingToReset) {
		t.Errorf("jetstream: %v", err)
	}
	if _, err := s.ResetAccount(ctx, did("nobody"), "", "ops", now); !errors.Is(err, ErrNothingToReset) {
		t.Errorf("account: %v", err)
	}
	if _, err := s.ResetViewer(ctx, did("nobody"), "", "ops", now); !errors.Is(err, ErrNothingToReset) {
		t.Errorf("viewer: %v", err)
	}
	if _, err := s.ResetViewer(ctx, did("nobody"), "folowing", "ops", now); !errors.Is(err, ErrUnknownLane) {
		t.Errorf("viewer of a feed that does not exist: %v, want ErrUnknownLane", err)
	}
	if entries, _ := s.Audit(ctx, 10); len(entries) != 0 {
		t.Errorf("audit recorded %+v", entries)
	}
}

func TestResetViewerAndAccountStartOver(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	s.RegisterViewer(ctx, did("alice"), "following", now)
	// alice's posts are in scope: bob, a viewer, follows her.
	register(t, s, "bob", "following")
	apply(t, s, follow("bob", "alice", "f1", 1))
	s.ClaimFirstRead(ctx, did("alice"), "following", "me", now, time.Minute)
	s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: followNSID, To: Listing{Round: 1, Page: 1, Complete: true}}, now)
	s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: postNSID, To: Listing{Round: 1, Page: 1, Complete: true}}, now)
	if _, err := s.CompleteFirstRead(ctx, did("alice"), "following", "me", now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResetViewer(ctx, did("alice"), "following", "ops", now); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.RegisterViewer(ctx, did("alice"), "following", now); st.Complete {
		t.Error("viewer still complete after reset")
	}
	if l, _ := s.ReadListing(ctx, did("alice"), followNSID); l.Complete || l.Round != 2 {
		t.Errorf("follow listing after viewer reset: %+v", l)
	}
	if _, err := s.ResetAccount(ctx, did("alice"), postNSID, "ops", now); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ReadListing(ctx, did("alice"), postNSID); l.Complete || l.Round != 2 {
		t.Errorf("post listing after account reset: %+v", l)
	}
	r, err := s.Report(ctx)
	if err != nil || len(r.Feeds) != 1 || r.Feeds[0].Viewers != 2 {
		t.Errorf("report %+v %v", r, err)
	}
}

func TestAddedTargetCollectionRebuildsItsViewers(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	if c, err := s.CheckScope(ctx, []string{"app.bsky.feed.post", "app.bsky.graph.follow"}); c != nil || err != nil {
		t.Fatalf("first scope check: %+v %v", c, err)
	}
	now := time.Unix(1_000, 0)
	s.RegisterViewer(ctx, did("alice"), "following", now)
	s.ClaimFirstRead(ctx, did("alice"), "following", "me", now, time.Minute)
	s.CompleteFirstRead(ctx, did("alice"), "following", "me", now)
	apply(t, s, follow("alice", "carol", "f1", 1)) // stores the cursor with its scope
	s.Close()

	// The config gains a repost target: the cursor keeps its position,
	// and alice's next read is a first read that fetches the new backlog.
	const reposts = "app.bsky.feed.repost"
	feeds := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}, {Collection: reposts, Cap: 200}}}}
	s = mustOpenWith(t, Options{Path: path, Feeds: feeds})
	before := s.Cursor()
	c, err := s.CheckScope(ctx, []string{"app.bsky.feed.post", reposts, "app.bsky.graph.follow"})
	if err != nil || c == nil || len(c.Added) != 1 || c.Added[0] != reposts || len(c.Removed) != 0 {
		t.Fatalf("scope change %+v %v", c, err)
	}
	if s.Cursor() != before {
		t.Errorf("cursor moved: %+v → %+v", before, s.Cursor())
	}
	if st, _ := s.RegisterViewer(ctx, did("alice"), "following", now); st.Complete {
		t.Error("viewer of the feed that gained a target is still complete")
	}
	if c, _ := s.CheckScope(ctx, []string{"app.bsky.feed.post", reposts, "app.bsky.graph.follow"}); c != nil {
		t.Errorf("unchanged scope reported a change: %+v", c)
	}
}

// A feed that gains a target another feed already has gains no new
// collection in the stream's scope, but its viewers still lack the
// backlog: they are rebuilt all the same. So are the viewers of a feed
// whose target is enabled again after it left the configuration.
func TestTargetNewToItsFeedRebuildsItsViewersEvenIfStored(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	const reposts = "app.bsky.feed.repost"
	following := Feed{Name: "following", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}}
	art := Feed{Name: "art", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: reposts, Cap: 200}}}
	complete := func(s *Store, viewer, feed string) {
		t.Helper()
		register(t, s, viewer, feed)
		if ok, err := s.ClaimFirstRead(ctx, did(viewer), feed, "me", now, time.Minute); !ok || err != nil {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if _, err := s.CompleteFirstRead(ctx, did(viewer), feed, "me", now); err != nil {
			t.Fatal(err)
		}
	}
	isComplete := func(s *Store, viewer, feed string) bool {
		t.Helper()
		st, err := s.RegisterViewer(ctx, did(viewer), feed, now)
		if err != nil {
			t.Fatal(err)
		}
		return st.Complete
	}

	s := mustOpenWith(t, Options{Path: path, Feeds: []Feed{following, art}})
	complete(s, "alice", "following")
	complete(s, "bob", "art")
	s.Close()

	withReposts := following
	withReposts.Targets = append(slices.Clone(following.Targets), Target{Collection: reposts, Cap: 200})
	s = mustOpenWith(t, Options{Path: path, Feeds: []Feed{withReposts, art}})
	if isComplete(s, "alice", "following") {
		t.Error("alice's feed gained reposts, which art already stored, and she is still complete")
	}
	if !isComplete(s, "bob", "art") {
		t.Error("bob's feed did not change, and he is to be rebuilt")
	}
	s.Close()

	// art leaves the configuration and comes back: its lane was not fed
	// meanwhile.
	s = mustOpenWith(t, Options{Path: path, Feeds: []Feed{withReposts}})
	s.Close()
	s = mustOpenWith(t, Options{Path: path, Feeds: []Feed{withReposts, art}})
	if isComplete(s, "bob", "art") {
		t.Error("art's lane was enabled again, and bob is still complete")
	}
}

// An operator command opens the database with Existing: a config whose
// feeds differ from the stored ones is refused and changes nothing, where
// it used to disable the running daemon's lanes; the same feeds open; a
// new database takes the command's feeds.
func TestAnOperatorCommandLeavesTheFeedDefinitions(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	mine := []Feed{{Name: "mine", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	daemon := mustOpenWith(t, Options{Path: path, Feeds: mine})
	if _, err := Open(ctx, Options{Path: path, Feeds: defaultFeeds, Existing: true}); !errors.Is(err, ErrFeedsDiffer) {
		t.Fatalf("a command with other feeds: %v, want ErrFeedsDiffer", err)
	}
	if n := count(t, daemon, `SELECT count(*) FROM feed_targets WHERE feed = 'mine' AND enabled = 1`); n != 1 {
		t.Errorf("the daemon's lane is no longer enabled")
	}
	if n := count(t, daemon, `SELECT count(*) FROM feed_targets WHERE feed <> 'mine'`); n != 0 {
		t.Errorf("the command's feeds were written")
	}
	same, err := Open(ctx, Options{Path: path, Feeds: mine, Existing: true})
	if err != nil {
		t.Fatalf("a command with the daemon's feeds: %v", err)
	}
	same.Close()

	fresh, err := Open(ctx, Options{Path: t.TempDir() + "/new.db", Feeds: mine, Existing: true})
	if err != nil {
		t.Fatalf("a command on a new database: %v", err)
	}
	defer fresh.Close()
	if n := count(t, fresh, `SELECT count(*) FROM feed_targets WHERE feed = 'mine' AND enabled = 1`); n != 1 {
		t.Errorf("a new database did not take the command's feeds")
	}
}

// A stream cursor reset that skips stream time records a gap, so the
// viewers are rebuilt from the PDSes rather than left without what was
// skipped; one back in time skips nothing; one into the future is
// refused, as the cursor, which never moves back, would hold there.
func TestAResetThatSkipsStreamTimeRecordsAGap(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(10_000, 0)
	register(t, s, "alice", "following")
	if ok, err := s.ClaimFirstRead(ctx, did("alice"), "following", "me", now, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := s.CompleteFirstRead(ctx, did("alice"), "following", "me", now); err != nil {
		t.Fatal(err)
	}
	apply(t, s, post("bob", "p1", 5_000_000_000)) // the stream at 5,000 s
	if _, err := s.ResetJetstream(ctx, now.Add(time.Second), "ops", now); !errors.Is(err, ErrResetToFuture) {
		t.Fatalf("reset into the future: %v, want ErrResetToFuture", err)
	}
	// Before 1970 the daemon would read no cursor and start at the live
	// tip, recording no gap (found by a review).
	for _, early := range []time.Time{time.Unix(0, 0), time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC)} {
		if _, err := s.ResetJetstream(ctx, early, "ops", now); !errors.Is(err, ErrResetBeforeEpoch) {
			t.Fatalf("reset to %s: %v, want ErrResetBeforeEpoch", early, err)
		}
	}
	if _, err := s.ResetJetstream(ctx, time.Unix(4_000, 0), "ops", now); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := s.LastGap(ctx); found {
		t.Fatal("a reset back in time recorded a gap")
	}
	if _, err := s.ResetJetstream(ctx, time.Time{}, "ops", now); err != nil { // to the live tip
		t.Fatal(err)
	}
	g, found, err := s.LastGap(ctx)
	if err != nil || !found || g.CursorUS != 4_000_000_000 || g.Size != 6_000*time.Second {
		t.Fatalf("gap %+v %v %v, want the 6,000 s from the reset cursor to now", g, found, err)
	}
	if st, _ := s.RegisterViewer(ctx, did("alice"), "following", now); st.Complete {
		t.Error("alice is still complete after a reset skipped stream time")
	}
}

// A feed whose follow collection changes keeps its lane, but the lane's
// rows came from the old follow graph, which nothing reads any more:
// retention looked for their holders through the new graph only and
// retired records the rows still named (found by a review). The rows go
// when the store opens with the change, and the feed's viewers are
// rebuilt from the new graph on their next reads.
func TestAFeedThatFollowsAnotherCollectionIsRebuilt(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	now := time.Unix(1_000, 0)
	s.RegisterViewer(ctx, did("v"), "following", now)
	s.ClaimFirstRead(ctx, did("v"), "following", "me", now, time.Minute)
	s.CompleteFirstRead(ctx, did("v"), "following", "me", now)
	apply(t, s, follow("v", "alice", "f", 1), post("alice", "held", 2))
	if got := feedRKeys(t, s, "following", "v", postNSID); len(got) != 1 {
		t.Fatalf("feed before the change = %v", got)
	}
	s.Close()

	changed := []Feed{{Name: "following", FollowCollection: "com.example.follow", MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	s = mustOpenWith(t, Options{Path: path, Feeds: changed})
	if n := querySQL[int](t, s, `SELECT count(*) FROM feed_items`); n != 0 {
		t.Errorf("%d feed rows from the old follow graph kept", n)
	}
	if st, _ := s.RegisterViewer(ctx, did("v"), "following", now); st.Complete {
		t.Error("the feed's viewer is still complete: its feed would stay empty")
	}
	s.Close()

	// An unchanged config keeps the rows it has.
	s = mustOpenWith(t, Options{Path: path, Feeds: changed})
	other := follow("v", "bob", "g", 3)
	other.Collection = "com.example.follow"
	apply(t, s, other, post("bob", "new", 4))
	if n := querySQL[int](t, s, `SELECT count(*) FROM feed_items`); n != 1 {
		t.Fatalf("a follow in the new collection fanned out %d rows, want 1", n)
	}
	s.Close()
	s = mustOpenWith(t, Options{Path: path, Feeds: changed})
	if n := querySQL[int](t, s, `SELECT count(*) FROM feed_items`); n != 1 {
		t.Errorf("reopened with the same config: %d feed rows, want 1", n)
	}
}

// A target collection that leaves the config (and so the stream's scope)
// and comes back starts its listings over: the rebuild its return
// triggers fetches them again and drops what was deleted while it was out
// of scope. Before, the listings stayed complete and the rebuild skipped
// them, so a deleted repost came back for good (found by a review).
func TestACollectionAddedBackIsListedAgain(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	const reposts = syntax.NSID("app.bsky.feed.repost")
	both := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}, {Collection: reposts, Cap: 200}}}}
	postsOnly := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	rec := func(k string) ListedRecord {
		return ListedRecord{RKey: syntax.RecordKey(k), CID: "bafy" + k, Value: json.RawMessage(`{"$type":"app.bsky.feed.repost"}`)}
	}

	s := mustOpenWith(t, Options{Path: path, Feeds: both})
	s.CheckScope(ctx, []string{string(followNSID), string(postNSID), string(reposts)})
	register(t, s, "v1", "following")
	apply(t, s, follow("v1", "alice", "f1", 1))
	// v1's first read lists alice's reposts: r1 and r2, complete.
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: reposts,
		Records: []ListedRecord{rec("r2"), rec("r1")}, To: Listing{Host: "h", Round: 1, Page: 1, Complete: true},
		FetchedAt: now, Span: &KeySpan{}}, now); err != nil {
		t.Fatal(err)
	}
	completeFirstRead(t, s, "v1", now)
	if got := feedRKeys(t, s, "following", "v1", reposts); len(got) != 2 {
		t.Fatalf("feed before = %v", got)
	}
	s.Close()

	// Reposts leave the config: the stream stops carrying them. Alice
	// deletes r1 meanwhile; the store cannot see it (the event, if it
	// came at all, is ignored).
	s = mustOpenWith(t, Options{Path: path, Feeds: postsOnly})
	s.CheckScope(ctx, []string{string(followNSID), string(postNSID)})
	res := apply(t, s, Change{DID: did("alice"), Collection: reposts, RKey: "r1", Op: OpDelete, Rev: rev(5), TimeUS: 5})
	if res.Applied != 0 {
		t.Fatalf("delete of an unconfigured collection applied: %+v", res)
	}
	s.Close()

	// Reposts come back: v1 is rebuilt at its next read, and its first
	// read lists alice's reposts again, as their listing is open.
	s = mustOpenWith(t, Options{Path: path, Feeds: both})
	c, _ := s.CheckScope(ctx, []string{string(followNSID), string(postNSID), string(reposts)})
	if c == nil || !slices.Contains(c.Added, string(reposts)) {
		t.Fatalf("scope change %+v", c)
	}
	l, err := s.ReadListing(ctx, did("alice"), reposts)
	if err != nil {
		t.Fatal(err)
	}
	if l.Complete {
		t.Fatalf("alice's repost listing is still complete after reposts came back into scope: %+v; "+
			"the rebuild would not fetch it (the backfill skips a complete listing)", l)
	}
	// The new round lists r2 only: the page vouches for every key, and r1
	// goes.
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("alice"), Collection: reposts,
		Records: []ListedRecord{rec("r2")}, To: Listing{Host: "h", Round: l.Round, Page: 1, Complete: true},
		FetchedAt: now, Span: &KeySpan{}}, now); err != nil {
		t.Fatal(err)
	}
	completeFirstRead(t, s, "v1", now)
	if got := feedRKeys(t, s, "following", "v1", reposts); !slices.Equal(got, []string{"r2"}) {
		t.Errorf("feed after the rebuild = %v, want [r2]: r1 was deleted while reposts were out of scope", got)
	}
}

// A follow collection that leaves the config and comes back starts its
// listings over, like a target collection: the rebuild lists the viewers'
// follows again and drops the ones deleted while it was out of scope.
// Before, they stayed complete and the rebuild used the stale follows
// (found by a review of 863a801).
func TestAFollowCollectionAddedBackIsListedAgain(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	orig := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	other := []Feed{{Name: "following", FollowCollection: "com.example.follow", MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	s := mustOpenWith(t, Options{Path: path, Feeds: orig})
	s.CheckScope(ctx, []string{string(followNSID), string(postNSID)})
	register(t, s, "v1", "following")
	listFollowsOnce(t, s, "v1", "alice", now) // v1's follow listing: f1 -> alice, complete
	apply(t, s, post("alice", "p1", 2))
	completeFirstRead(t, s, "v1", now)
	if got := feedRKeys(t, s, "following", "v1", postNSID); len(got) != 1 {
		t.Fatalf("feed before = %v", got)
	}
	s.Close()

	s = mustOpenWith(t, Options{Path: path, Feeds: other})
	s.CheckScope(ctx, []string{"com.example.follow", string(postNSID)})
	apply(t, s, unfollow("v1", "f1", 5)) // out of scope: not seen
	s.Close()

	s = mustOpenWith(t, Options{Path: path, Feeds: orig})
	s.CheckScope(ctx, []string{string(followNSID), string(postNSID)})
	l, err := s.ReadListing(ctx, did("v1"), followNSID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Complete {
		t.Fatalf("v1's follow listing still complete after the follow collection came back: %+v", l)
	}
	if st, _ := s.RegisterViewer(ctx, did("v1"), "following", now); st.Complete {
		t.Fatal("v1 is not rebuilt")
	}
	// The rebuild lists v1's follows again: none now.
	if _, err := s.ApplyListingPage(ctx, &ListingPage{Account: did("v1"), Collection: followNSID,
		To: Listing{Host: "h", Round: l.Round, Page: 1, Complete: true}, FetchedAt: now, Span: &KeySpan{}}, now); err != nil {
		t.Fatal(err)
	}
	completeFirstRead(t, s, "v1", now)
	if got := feedRKeys(t, s, "following", "v1", postNSID); len(got) != 0 {
		t.Errorf("feed after the rebuild = %v: v1 unfollowed alice while follows were out of scope", got)
	}
}

// completeFirstRead claims and completes a viewer's first read, as the
// backfill does once its listings are stored.
func completeFirstRead(t *testing.T, s *Store, viewer string, now time.Time) {
	t.Helper()
	ctx := context.Background()
	if ok, err := s.ClaimFirstRead(ctx, did(viewer), "following", "me", now, time.Minute); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if _, err := s.CompleteFirstRead(ctx, did(viewer), "following", "me", now); err != nil {
		t.Fatal(err)
	}
}

// listFollowsOnce applies a complete one-page follow listing of viewer:
// f1, a follow of subject.
func listFollowsOnce(t *testing.T, s *Store, viewer, subject string, now time.Time) {
	t.Helper()
	if _, err := s.ApplyListingPage(context.Background(), &ListingPage{Account: did(viewer), Collection: followNSID,
		Records: []ListedRecord{{RKey: "f1", CID: "bafyf1", Subject: did(subject),
			Value: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q}`, did(subject)))}},
		To: Listing{Host: "h", Round: 1, Page: 1, Complete: true}, FetchedAt: now, Span: &KeySpan{}}, now); err != nil {
		t.Fatal(err)
	}
}
