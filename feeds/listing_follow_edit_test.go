package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A follow record whose subject was changed while the stream could not tell
// us (a gap, before the daemon ran) is listed with the new subject under
// the stored key: the follow takes it, as a listed post takes an edit the
// stream missed, and the viewer's feed follows it, the old subject's posts
// leaving and the new one's coming in. A follow the stream changed after
// the fetch keeps the stream's subject.
func TestAListedFollowTakesASubjectTheStreamMissed(t *testing.T) {
	for _, indexAll := range []bool{true, false} {
		t.Run(fmt.Sprintf("index_all=%v", indexAll), func(t *testing.T) {
			s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: defaultFeeds, IndexAll: indexAll})
			if !indexAll {
				register(t, s, "v1", "following")
			}
			ctx := context.Background()
			later := follow("v1", "alice", "f2", 4)
			later.Rev = syntax.NewTIDFromTime(reconcileAsOf.Add(time.Minute), 0).String() // written after the fetch
			apply(t, s, follow("v1", "alice", "f1", 1), follow("v1", "bob", "f0", 2), later)
			apply(t, s, post("alice", "a1", 5), post("bob", "b1", 6), post("carol", "c1", 7))
			if !indexAll {
				// carol is no one's followee yet: her post is not stored.
				if got, want := feedRKeys(t, s, "following", "v1", postNSID), []string{"b1", "a1"}; !slices.Equal(got, want) {
					t.Fatalf("setup: feed = %v, want %v", got, want)
				}
			}

			subjectOf := func(rkey, subject string) ListedRecord {
				return ListedRecord{RKey: syntax.RecordKey(rkey), CID: "bafyfollow" + subject, Subject: did(subject),
					Value: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q}`, did(subject)))}
			}
			// f1 now follows carol; f2, changed by the stream after the
			// fetch, is listed with an older subject.
			page := &ListingPage{Account: did("v1"), Collection: followNSID, FetchedAt: reconcileAsOf,
				Records: []ListedRecord{subjectOf("f2", "dave"), subjectOf("f1", "carol"), subjectOf("f0", "bob")}}
			page.To = nextPage(t, s, did("v1"), followNSID)
			if _, err := s.ApplyListingPage(ctx, page, reconcileAsOf); err != nil {
				t.Fatal(err)
			}
			got := querySQL[string](t, s, `SELECT group_concat(r, ' ') FROM (SELECT f.rkey || '=' || a.did AS r
				FROM follows f JOIN actors a ON a.id = f.subject_id ORDER BY f.rkey)`)
			if want := "f0=did:plc:bob f1=did:plc:carol f2=did:plc:alice"; got != want {
				t.Errorf("follows after the listing: %s, want %s", got, want)
			}
			if !indexAll {
				// carol's backlog is wanted; stored, it would be merged.
				apply(t, s, post("carol", "c1", 7))
			}
			want := []string{"c1", "b1", "a1"} // alice still followed through f2
			if got := feedRKeys(t, s, "following", "v1", postNSID); !slices.Equal(got, want) {
				t.Errorf("feed = %v, want %v", got, want)
			}
			// The stream's delete of f2 now takes alice out.
			del := unfollow("v1", "f2", 8)
			del.Rev = syntax.NewTIDFromTime(reconcileAsOf.Add(2*time.Minute), 0).String()
			apply(t, s, del)
			if got, want := feedRKeys(t, s, "following", "v1", postNSID), []string{"c1", "b1"}; !slices.Equal(got, want) {
				t.Errorf("feed after f2's delete = %v, want %v", got, want)
			}
		})
	}
}
