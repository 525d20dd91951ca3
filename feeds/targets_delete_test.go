package feeds

import (
	"slices"
	"testing"
)

// A batch's deletes leave every holder's feed: posts of several authors,
// one created in the same batch, one that a new follower merged earlier in
// the batch. The rows removed are counted.
func TestDeletesLeaveEveryHoldersFeed(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s,
		follow("v1", "alice", "f1", 1), follow("v2", "alice", "f2", 2), follow("v2", "bob", "f3", 3),
		post("alice", "a1", 10), post("alice", "a2", 11), post("bob", "b1", 12))
	res := apply(t, s,
		follow("v3", "alice", "f4", 20), // merges a1 and a2 into v3's feed now
		post("bob", "b2", 21),
		unpost("alice", "a1", 22),
		unpost("bob", "b2", 23), // created in this batch
		unpost("bob", "b1", 24),
	)
	for viewer, want := range map[string][]string{"v1": {"a2"}, "v2": {"a2"}, "v3": {"a2"}} {
		if got := feedRKeys(t, s, "following", viewer, postNSID); !slices.Equal(got, want) {
			t.Errorf("%s reads %v, want %v", viewer, got, want)
		}
		if n := feedRowsOf(t, s, viewer); n != len(want) {
			t.Errorf("%s holds %d feed rows, want %d", viewer, n, len(want))
		}
	}
	// a1 from v1, v2 and v3; b1 from v2; b2 was never fanned out.
	if res.RemovedRows != 4 {
		t.Errorf("RemovedRows = %d, want 4", res.RemovedRows)
	}
}

// A post deleted and its author unfollowed in one batch leave no row in
// either follower's feed. The unmerge finds an author's records in
// records, where the deleted post no longer is, so a removal deferred past
// the unfollow (tried: docs/benchmarks.md, "Seventh round") would leave
// the row behind, unread but counted against the cap.
func TestDeleteThenUnfollowInOneBatchLeavesNoRow(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("v1", "alice", "f1", 1), follow("v2", "alice", "f2", 2), post("alice", "a1", 10))
	if feedRowsOf(t, s, "v1") != 1 || feedRowsOf(t, s, "v2") != 1 {
		t.Fatal("the post did not reach both followers")
	}
	apply(t, s, unpost("alice", "a1", 20), unfollow("v1", "f1", 21))
	for _, v := range []string{"v1", "v2"} {
		if n := feedRowsOf(t, s, v); n != 0 {
			t.Errorf("%s holds %d feed rows after the delete, want 0", v, n)
		}
	}
}
