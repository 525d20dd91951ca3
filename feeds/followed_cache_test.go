package feeds

import (
	"context"
	"testing"
)

// The scope check remembers followed authors, and forgets one as soon as
// it is seen leaving scope: a post after the last unfollow, or after the
// only follower's account was deleted, is out of scope again.
func TestFollowedAuthorsAreForgottenWhenTheyLeaveScope(t *testing.T) {
	s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds})
	register(t, s, "v1", "following")
	register(t, s, "v2", "following")
	apply(t, s, follow("v1", "alice", "f1", 1), follow("v2", "bob", "f1", 2))

	if res := apply(t, s, post("alice", "p1", 10), post("bob", "p1", 11)); res.Applied != 2 || res.OutOfScope != 0 {
		t.Fatalf("posts of followed authors: %+v", res)
	}
	alice := querySQL[int64](t, s, `SELECT id FROM actors WHERE did = ?`, string(did("alice")))
	if _, ok := s.followed[alice]; !ok {
		t.Fatal("a followed author was not remembered after commit")
	}
	if res := apply(t, s, post("alice", "p2", 12)); res.Applied != 1 || feedRowsOf(t, s, "v1") != 2 {
		t.Fatalf("a remembered author's post: %+v, v1 holds %d", res, feedRowsOf(t, s, "v1"))
	}

	apply(t, s, unfollow("v1", "f1", 13))
	if _, ok := s.followed[alice]; ok {
		t.Fatal("an author who left scope is still remembered")
	}
	if res := apply(t, s, post("alice", "p3", 14)); res.OutOfScope != 1 || res.Applied != 0 {
		t.Fatalf("a post after the last unfollow: %+v, want out of scope", res)
	}

	// bob's only follower deletes its account: its follows go at once.
	batch := &Batch{Accounts: []AccountStatus{{DID: did("v2"), Status: "deleted", TimeUS: 15}}, Cursor: StreamCursor{TimeUS: 15}}
	if _, err := s.ApplyBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if res := apply(t, s, post("bob", "p2", 16)); res.OutOfScope != 1 || res.Applied != 0 {
		t.Fatalf("a post after the only follower's account was deleted: %+v, want out of scope", res)
	}
}
