package feeds

import (
	"fmt"
	"slices"
	"testing"
)

// A listing can store a post before the stream delivers its create: a
// first read lists an account's newest posts while the stream catches up,
// or simply runs a second behind its PDS. The create then finds the listed
// copy, which only the listing's own viewer got (its first read builds its
// feed from what is stored); it must still reach every follower of the
// author, as a create the listing had not come before does.
func TestAListedPostTheStreamThenCreatesReachesEveryFollower(t *testing.T) {
	for _, indexAll := range []bool{true, false} {
		t.Run(fmt.Sprintf("index_all=%v", indexAll), func(t *testing.T) {
			s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: indexAll})
			if !indexAll {
				register(t, s, "v2", "following")
			}
			apply(t, s, follow("v2", "alice", "f1", 1), post("alice", "a1", 2))

			// Another viewer's first read lists alice's newest posts, a9
			// among them, before the stream has delivered it.
			if res := listPosts(t, s, reconcileAsOf, nil, "a9", "a1"); res.Written != 1 {
				t.Fatalf("setup: listing wrote %d, want a9", res.Written)
			}
			if r := apply(t, s, post("alice", "a9", 3)); r.Applied != 1 {
				t.Fatalf("a9's create from the stream: %+v, want applied", r)
			}
			if got, want := feedRKeys(t, s, "following", "v2", postNSID), []string{"a9", "a1"}; !slices.Equal(got, want) {
				t.Errorf("v2's feed = %v, want %v", got, want)
			}
			// A replay changes nothing.
			if r := apply(t, s, post("alice", "a9", 3)); r.Duplicates != 1 || r.FanoutRows != 0 {
				t.Errorf("replayed create: %+v, want a duplicate", r)
			}
		})
	}
}
