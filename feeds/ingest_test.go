package feeds

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

func TestFanoutReachesFollowersNewestFirst(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s,
		follow("alice", "carol", "f1", 1),
		follow("bob", "carol", "f2", 2),
		follow("alice", "dave", "f3", 3),
	)
	res := apply(t, s, post("carol", "p1", 10), post("dave", "p2", 11), post("carol", "p3", 12), post("erin", "p4", 13))
	if res.Applied != 4 || res.FanoutRows != 5 {
		t.Fatalf("result = %+v, want 4 applied and 5 fan-out rows (alice 3, bob 2)", res)
	}
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"p3", "p2", "p1"}; !slices.Equal(got, want) {
		t.Errorf("alice feed = %v, want %v", got, want)
	}
	if got, want := feedRKeys(t, s, "following", "bob", postNSID), []string{"p3", "p1"}; !slices.Equal(got, want) {
		t.Errorf("bob feed = %v, want %v", got, want)
	}
	if got := feedRKeys(t, s, "following", "erin", postNSID); len(got) != 0 {
		t.Errorf("erin follows nobody but has %v", got)
	}
}

func TestFollowMergesRecentTargets(t *testing.T) {
	feeds := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 2, Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	s := MustOpen(t, feeds)
	apply(t, s, post("carol", "p1", 1), post("carol", "p2", 2), post("carol", "p3", 3))
	res := apply(t, s, follow("alice", "carol", "f1", 10))
	if res.MergedRows != 2 {
		t.Fatalf("merged %d rows, want the merge limit 2", res.MergedRows)
	}
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"p3", "p2"}; !slices.Equal(got, want) {
		t.Errorf("alice feed = %v, want %v", got, want)
	}
}

func TestDeleteRemovesFromEveryFeedAndStaysDeleted(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	create := post("carol", "p1", 10)
	apply(t, s, follow("alice", "carol", "f1", 1), follow("bob", "carol", "f2", 2), create, post("carol", "p2", 11))
	res := apply(t, s, unpost("carol", "p1", 20))
	if res.RemovedRows != 2 {
		t.Errorf("removed %d rows, want 2", res.RemovedRows)
	}
	// A replayed create, older than the delete, must not resurrect it.
	res = apply(t, s, create)
	if res.Duplicates != 1 || res.Applied != 0 {
		t.Errorf("replayed create: %+v, want one duplicate", res)
	}
	for _, v := range []string{"alice", "bob"} {
		if got, want := feedRKeys(t, s, "following", v, postNSID), []string{"p2"}; !slices.Equal(got, want) {
			t.Errorf("%s feed = %v, want %v", v, got, want)
		}
	}
	// A newer create under the same key is a new record.
	recreate := post("carol", "p1", 30)
	if res := apply(t, s, recreate); res.Applied != 1 || res.FanoutRows != 2 {
		t.Errorf("re-create: %+v, want applied with 2 rows", res)
	}
	var tombstones int
	if err := s.writer.QueryRow(`SELECT count(*) FROM tombstones`).Scan(&tombstones); err != nil || tombstones != 0 {
		t.Errorf("%d tombstones left after the re-create (err %v), want 0", tombstones, err)
	}
}

func TestUnfollowRemovesUnlessAnotherFollowRemains(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s,
		follow("alice", "carol", "f1", 1),
		follow("alice", "carol", "f2", 2), // a second follow record of the same subject
		follow("alice", "dave", "f3", 3),
		post("carol", "p1", 10), post("dave", "p2", 11),
	)
	apply(t, s, unfollow("alice", "f1", 20))
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"p2", "p1"}; !slices.Equal(got, want) {
		t.Fatalf("after first unfollow feed = %v, want %v (f2 still follows carol)", got, want)
	}
	apply(t, s, unfollow("alice", "f2", 21))
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"p2"}; !slices.Equal(got, want) {
		t.Fatalf("after second unfollow feed = %v, want %v", got, want)
	}
	// A new post by carol no longer reaches alice; a replayed old follow
	// does not bring her back.
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p3", 30))
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"p2"}; !slices.Equal(got, want) {
		t.Fatalf("after replay feed = %v, want %v", got, want)
	}
}

func TestReplayChangesNothing(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	stream := []Change{
		follow("alice", "carol", "f1", 1), follow("bob", "carol", "f2", 2),
		post("carol", "p1", 3), post("carol", "p2", 4), unpost("carol", "p1", 5),
		unfollow("bob", "f2", 6), post("carol", "p3", 7),
	}
	apply(t, s, stream...)
	before := dump(t, s)
	res := apply(t, s, stream...)
	if res.Applied != 0 || res.Duplicates != len(stream) {
		t.Errorf("replay result %+v, want all %d duplicates", res, len(stream))
	}
	if after := dump(t, s); !slices.Equal(before, after) {
		t.Errorf("replay changed the database:\nbefore %v\nafter  %v", before, after)
	}
}

func TestUpdateRewritesBodyInPlace(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p1", 10))
	upd := post("carol", "p1", 20)
	upd.Op, upd.CID, upd.Record = OpUpdate, "bafynew", json.RawMessage(`{"$type":"app.bsky.feed.post","text":"edited"}`)
	if res := apply(t, s, upd); res.Applied != 1 || res.FanoutRows != 0 {
		t.Fatalf("update: %+v", res)
	}
	p, err := s.ReadFeed(context.Background(), PageQuery{Feed: "following", Viewer: did("alice"), Collection: postNSID, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1 || p.Items[0].CID != "bafynew" || string(p.Items[0].Value) != string(upd.Record) || p.Items[0].Key.SortUS != 10 {
		t.Fatalf("items after update = %+v", p.Items)
	}
}

func TestSortKeyClampsFutureAndKeepsBackdated(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	old := post("carol", "old", 1000)
	old.CreatedAtUS = 5 // 1970: sinks
	future := post("carol", "future", 1001)
	future.CreatedAtUS = 4_102_444_800_000_000 // 2100: held at its indexed time
	apply(t, s, follow("alice", "carol", "f1", 1), old, post("carol", "now", 1002), future)
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"now", "future", "old"}; !slices.Equal(got, want) {
		t.Errorf("feed = %v, want %v", got, want)
	}
}

func TestSelfFollowIsStoredButNotFed(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, post("alice", "mine", 1), follow("alice", "alice", "f1", 2), post("alice", "mine2", 3))
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 0 {
		t.Errorf("self-follow put %v into alice's own feed", got)
	}
	if n := count(t, s, `SELECT count(*) FROM follows`); n != 1 {
		t.Errorf("follows = %d, want the self-follow stored", n)
	}
}

func TestCustomFollowCollectionAndFeedsSharingATarget(t *testing.T) {
	const listFollow = syntax.NSID("com.example.graph.subscribe")
	feeds := []Feed{
		{Name: "following", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}},
		{Name: "subs", FollowCollection: listFollow, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 5}}},
	}
	s := MustOpen(t, feeds)
	sub := follow("alice", "dave", "s1", 1)
	sub.Collection = listFollow
	apply(t, s, sub, follow("alice", "carol", "f1", 2), post("carol", "p1", 3), post("dave", "p2", 4))
	if got, want := feedRKeys(t, s, "following", "alice", postNSID), []string{"p1"}; !slices.Equal(got, want) {
		t.Errorf("following = %v, want %v", got, want)
	}
	if got, want := feedRKeys(t, s, "subs", "alice", postNSID), []string{"p2"}; !slices.Equal(got, want) {
		t.Errorf("subs = %v, want %v", got, want)
	}
}

func TestCursorPersistsAndNeverGoesBackwards(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	s := mustOpenAt(t, path, defaultFeeds)
	ctx := context.Background()
	if _, err := s.ApplyBatch(ctx, &Batch{Changes: []Change{post("carol", "p1", 100)}, Cursor: StreamCursor{TimeUS: 100, Seq: 7, Host: "wss://a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyBatch(ctx, &Batch{Cursor: StreamCursor{TimeUS: 50, Seq: 3, Host: "wss://b"}}); err != nil {
		t.Fatal(err)
	}
	want := StreamCursor{TimeUS: 100, Seq: 7, Host: "wss://a"}
	if got := s.Cursor(); got != want {
		t.Errorf("in-memory cursor = %+v, want %+v", got, want)
	}
	s.Close()
	s = mustOpenAt(t, path, defaultFeeds)
	if got := s.Cursor(); got != want {
		t.Errorf("reopened cursor = %+v, want %+v", got, want)
	}
}

func TestFailedBatchStoresNothing(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.ApplyBatch(ctx, &Batch{Changes: []Change{follow("alice", "carol", "f1", 1)}, Cursor: StreamCursor{TimeUS: 1}})
	if err == nil {
		t.Fatal("batch with a cancelled context succeeded")
	}
	if got := s.Cursor(); got.TimeUS != 0 {
		t.Errorf("cursor moved to %+v after a failed batch", got)
	}
	if n := count(t, s, `SELECT count(*) FROM follows`); n != 0 {
		t.Errorf("failed batch left %d follows", n)
	}
	// The writer still works and interns the actor afresh.
	apply(t, s, follow("alice", "carol", "f1", 1), post("carol", "p1", 2))
	if got := feedRKeys(t, s, "following", "alice", postNSID); len(got) != 1 {
		t.Errorf("feed after recovery = %v", got)
	}
}

func count(tb testing.TB, s *Store, query string) int {
	tb.Helper()
	var n int
	if err := s.reader.QueryRow(query).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return n
}

// dump lists every row that matters for replay equality.
func dump(tb testing.TB, s *Store) []string {
	tb.Helper()
	var out []string
	for _, q := range []string{
		`SELECT 'f', actor_id, collection_id, rkey, subject_id, rev FROM follows ORDER BY 2, 3, 4`,
		`SELECT 'r', id, actor_id, rkey, cid, rev, sort_us FROM records ORDER BY 2`,
		`SELECT 't', actor_id, collection_id, rkey, rev, 0 FROM tombstones ORDER BY 2, 3, 4`,
		`SELECT 'i', viewer_id, target_id, sort_us, record_id, 0 FROM feed_items ORDER BY 2, 3, 4, 5`,
	} {
		rows, err := s.reader.Query(q)
		if err != nil {
			tb.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				tb.Fatal(err)
			}
			out = append(out, fmtRow(vals))
		}
		rows.Close()
	}
	return out
}
