package feeds

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

const (
	followNSID = syntax.NSID("app.bsky.graph.follow")
	postNSID   = syntax.NSID("app.bsky.feed.post")
)

var defaultFeeds = []Feed{{
	Name: "following", FollowCollection: followNSID, MergeLimit: 100,
	Targets: []Target{{Collection: postNSID, Cap: 200}},
}}

// MustOpen opens a store in index_all mode on a fresh file in t.TempDir().
func MustOpen(tb testing.TB, feeds []Feed) *Store {
	tb.Helper()
	return mustOpenAt(tb, tb.TempDir()+"/appview.db", feeds)
}

func mustOpenAt(tb testing.TB, path string, feeds []Feed) *Store {
	tb.Helper()
	return mustOpenWith(tb, Options{Path: path, Feeds: feeds, IndexAll: true, RecordCacheMB: 4})
}

func mustOpenWith(tb testing.TB, opts Options) *Store {
	tb.Helper()
	s, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func did(name string) syntax.DID { return syntax.DID("did:plc:" + name) }

// rev makes a TID-shaped, string-sortable revision from a counter.
func rev(n int64) string { return string(syntax.NewTIDFromInteger(uint64(n) << 10)) }

func follow(follower, subject string, rkey string, n int64) Change {
	return Change{
		DID: did(follower), Collection: followNSID, RKey: syntax.RecordKey(rkey), Op: OpCreate,
		Rev: rev(n), CID: "bafyfollow", Subject: did(subject), TimeUS: n,
		Record: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.graph.follow","subject":%q}`, did(subject))),
	}
}

func unfollow(follower, rkey string, n int64) Change {
	return Change{DID: did(follower), Collection: followNSID, RKey: syntax.RecordKey(rkey), Op: OpDelete, Rev: rev(n), TimeUS: n}
}

func post(author, rkey string, n int64) Change {
	return Change{
		DID: did(author), Collection: postNSID, RKey: syntax.RecordKey(rkey), Op: OpCreate,
		Rev: rev(n), CID: "bafypost" + rkey, TimeUS: n,
		Record: json.RawMessage(fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":%q}`, rkey)),
	}
}

func unpost(author, rkey string, n int64) Change {
	return Change{DID: did(author), Collection: postNSID, RKey: syntax.RecordKey(rkey), Op: OpDelete, Rev: rev(n), TimeUS: n}
}

func apply(tb testing.TB, s *Store, changes ...Change) BatchResult {
	tb.Helper()
	var last int64
	for _, c := range changes {
		last = max(last, c.TimeUS)
	}
	res, err := s.ApplyBatch(context.Background(), &Batch{Changes: changes, Cursor: StreamCursor{TimeUS: last}})
	if err != nil {
		tb.Fatalf("apply batch: %v", err)
	}
	return res
}

// feedRKeys reads the record keys of a viewer's whole feed, page by page, newest first.
func feedRKeys(tb testing.TB, s *Store, feed string, viewer string, coll syntax.NSID) []string {
	tb.Helper()
	var out []string
	q := PageQuery{Feed: feed, Viewer: did(viewer), Collection: coll, Limit: 7}
	for {
		p, err := s.ReadFeed(context.Background(), q)
		if err != nil {
			tb.Fatalf("read feed: %v", err)
		}
		for _, it := range p.Items {
			out = append(out, it.RKey)
		}
		if p.Next == nil {
			return out
		}
		q.Before = p.Next
	}
}
