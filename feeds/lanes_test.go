package feeds

import (
	"slices"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A target dropped from a feed and added back: while it was out, an
// unfollow (and a delete) reached only the feed's other lanes, so the
// re-enabled lane must not serve the unfollowed author's posts.
func TestAReenabledLaneDropsRowsOfAuthorsUnfollowedMeanwhile(t *testing.T) {
	const repostNSID = syntax.NSID("app.bsky.feed.repost")
	both := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}, {Collection: repostNSID, Cap: 200}}}}
	repostsOnly := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: repostNSID, Cap: 200}}}}
	path := t.TempDir() + "/appview.db"
	s := mustOpenAt(t, path, both)
	apply(t, s, follow("v1", "x", "f1", 1), post("x", "p1", 2))
	if got := feedRKeys(t, s, "following", "v1", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Fatalf("feed = %v", got)
	}
	s.Close()

	s = mustOpenAt(t, path, repostsOnly) // the post lane is disabled
	apply(t, s, unfollow("v1", "f1", 3))
	s.Close()

	s = mustOpenAt(t, path, both) // and enabled again
	if got := feedRKeys(t, s, "following", "v1", postNSID); len(got) != 0 {
		t.Errorf("v1's posts lane = %v after v1 unfollowed x", got)
	}
	if n := count(t, s, `SELECT count(*) FROM feed_items fi JOIN records r ON r.id = fi.record_id
		JOIN actors a ON a.id = r.actor_id WHERE a.did = 'did:plc:x'`); n != 0 {
		t.Errorf("%d feed rows of the unfollowed x remain", n)
	}
}
