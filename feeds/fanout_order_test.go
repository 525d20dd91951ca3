package feeds

import (
	"slices"
	"testing"
)

// The fan-out runs at commit, after every change of the transaction; the
// feeds it leaves must be those of applying the changes one at a time.
func TestDeferredFanoutMatchesOneChangeAtATime(t *testing.T) {
	type step = []Change
	cases := map[string]struct {
		before, batch []Change
		want          []string
	}{
		"post then unfollow": {
			before: step{follow("v", "a", "f1", 1)},
			batch:  step{post("a", "p", 2), unfollow("v", "f1", 3)},
		},
		"unfollow then post": {
			before: step{follow("v", "a", "f1", 1)},
			batch:  step{unfollow("v", "f1", 2), post("a", "p", 3)},
		},
		"post then follow": {
			batch: step{post("a", "p", 2), follow("v", "a", "f1", 3)},
			want:  []string{"p"},
		},
		"post, follow, unfollow": {
			batch: step{post("a", "p", 2), follow("v", "a", "f1", 3), unfollow("v", "f1", 4)},
		},
		"post, unfollow, follow again": {
			before: step{follow("v", "a", "f1", 1)},
			batch:  step{post("a", "p", 2), unfollow("v", "f1", 3), follow("v", "a", "f2", 4)},
			want:   []string{"p"},
		},
		"post then delete": {
			before: step{follow("v", "a", "f1", 1)},
			batch:  step{post("a", "p", 2), unpost("a", "p", 3)},
		},
		"two follows, one unfollowed": {
			before: step{follow("v", "a", "f1", 1), follow("v", "a", "f2", 1)},
			batch:  step{post("a", "p", 2), unfollow("v", "f1", 3)},
			want:   []string{"p"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for i, mode := range []string{"one batch", "one change per batch"} {
				s := MustOpen(t, defaultFeeds)
				if len(tc.before) > 0 {
					apply(t, s, tc.before...)
				}
				if i == 0 {
					apply(t, s, tc.batch...)
				} else {
					for _, c := range tc.batch {
						apply(t, s, c)
					}
				}
				got := feedRKeys(t, s, "following", "v", postNSID)
				if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
					t.Errorf("%s: feed %v, want %v", mode, got, tc.want)
				}
			}
		})
	}
}

// records.id is a rowid: a post deleted in a transaction hands its id to
// the next record stored, and the deleted post's pending fan-out must not
// deliver the new one to the deleted post's author's followers.
func TestDeferredFanoutOfAReusedRecordID(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("v", "b", "f1", 1), follow("w", "a", "f2", 1))
	apply(t, s, post("b", "q", 2), unpost("b", "q", 3), post("a", "p", 4))
	if got := feedRKeys(t, s, "following", "v", postNSID); len(got) != 0 {
		t.Errorf("b's follower got %v, want nothing: b's post was deleted and p is a's", got)
	}
	if got := feedRKeys(t, s, "following", "w", postNSID); !slices.Equal(got, []string{"p"}) {
		t.Errorf("a's follower got %v, want [p]", got)
	}
}
