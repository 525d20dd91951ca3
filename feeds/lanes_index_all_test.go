package feeds

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// rebuildQueued runs the rebuilds a store has queued, as the daemon does
// at start in index_all mode, and reports the feeds it rebuilt.
func rebuildQueued(t *testing.T, s *Store) []string {
	t.Helper()
	pending, err := s.UnfinishedRebuilds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var feeds []string
	for _, p := range pending {
		if _, err := s.RebuildFeed(context.Background(), p.Feed, RebuildOptions{}); err != nil {
			t.Fatal(err)
		}
		feeds = append(feeds, p.Feed)
	}
	return feeds
}

// index_all: a feed added later over a collection already stored for
// another feed. No first read rebuilds a viewer in this mode, so the
// change queues the feed's rebuild; without it the feed kept only what
// arrived afterwards, its stored backlog skipped (found by a review).
func TestAFeedAddedLaterInIndexAllGetsItsBacklog(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	a := Feed{Name: "a", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}}
	b := Feed{Name: "b", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}}
	s := mustOpenAt(t, path, []Feed{a})
	if got := rebuildQueued(t, s); len(got) != 0 {
		t.Fatalf("a new database queued rebuilds of %v", got)
	}
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "p1", 2), post("alice", "p2", 3))
	s.Close()

	s = mustOpenAt(t, path, []Feed{a, b}) // feed b is added
	apply(t, s, post("alice", "p3", 4))
	if got := rebuildQueued(t, s); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("queued rebuilds %v, want [b]", got)
	}
	if got := feedRKeys(t, s, "b", "v1", postNSID); !slices.Equal(got, []string{"p3", "p2", "p1"}) {
		t.Errorf("new feed b = %v, want [p3 p2 p1]", got)
	}
	if got := rebuildQueued(t, s); len(got) != 0 {
		t.Errorf("rebuilds still queued after they ran: %v", got)
	}
}

// index_all: a target dropped from a feed and added back is cleared as
// stale, and rebuilt from what is stored: an author the viewer still
// follows keeps its records in the feed (found by a review).
func TestAReenabledLaneInIndexAllKeepsStillFollowedAuthors(t *testing.T) {
	const repostNSID = "app.bsky.feed.repost"
	both := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}, {Collection: repostNSID, Cap: 200}}}}
	postsOnly := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}}}}
	path := t.TempDir() + "/appview.db"
	s := mustOpenAt(t, path, both)
	apply(t, s, follow("v1", "x", "f1", 1), target(repostNSID, "x", "r1", 2))
	s.Close()
	s = mustOpenAt(t, path, postsOnly) // reposts leave the config
	s.Close()
	s = mustOpenAt(t, path, both) // and come back; v1 still follows x, r1 is still stored
	rebuildQueued(t, s)
	if got := feedRKeys(t, s, "following", "v1", repostNSID); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("re-enabled repost lane = %v, want [r1]", got)
	}
}

// An operator command opened with a config whose index_all differs from
// the daemon's: its rebuild took the registered viewers (none in index_all
// mode) for the audience, rebuilt nothing, and deleted the rebuild the
// daemon had queued when the feed was added, so the feed's stored backlog
// was skipped for good. The command is refused instead.
func TestACommandWithAnotherIndexAllModeLeavesTheQueuedRebuild(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	a := Feed{Name: "a", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}}
	b := Feed{Name: "b", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}}
	s := mustOpenAt(t, path, []Feed{a})
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "p1", 2), post("alice", "p2", 3))
	s.Close()
	s = mustOpenAt(t, path, []Feed{a, b}) // feed b is added: its rebuild is queued
	s.Close()                             // the daemon stops before running it

	cmd, err := Open(context.Background(), Options{Path: path, Feeds: []Feed{a, b}, Existing: true})
	if err == nil {
		if _, err := cmd.RebuildFeed(context.Background(), "b", RebuildOptions{}); err != nil {
			t.Fatal(err)
		}
		cmd.Close()
		t.Errorf("a command with index_all off opened a database the daemon runs in index_all mode")
	} else if !errors.Is(err, ErrFeedsDiffer) {
		t.Fatalf("open: %v, want ErrFeedsDiffer", err)
	}

	s = mustOpenAt(t, path, []Feed{a, b})
	rebuildQueued(t, s)
	if got := feedRKeys(t, s, "b", "v1", postNSID); !slices.Equal(got, []string{"p2", "p1"}) {
		t.Errorf("feed b = %v, want [p2 p1]: its backlog was skipped", got)
	}
}

// A rebuild queued for a feed the config then dropped (before the daemon
// ran it) could never run: RebuildFeed refuses a feed not configured, so
// the daemon warned of it at every start, for good (a previous session's
// note). The sync drops it; a feed added back gains its targets again and
// has its rebuild queued afresh.
func TestARebuildOfAFeedNoLongerConfiguredIsDropped(t *testing.T) {
	path := t.TempDir() + "/appview.db"
	a := Feed{Name: "a", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}}
	b := Feed{Name: "b", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 200}}}
	s := mustOpenAt(t, path, []Feed{a})
	apply(t, s, follow("v1", "alice", "f1", 1), post("alice", "p1", 2))
	s.Close()
	s = mustOpenAt(t, path, []Feed{a, b}) // b added: its rebuild is queued, not run
	s.Close()

	s = mustOpenAt(t, path, []Feed{a}) // b dropped before it ran
	pending, err := s.UnfinishedRebuilds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 0 {
		t.Fatalf("unfinished rebuilds %+v after their feed left the config, want none", pending)
	}
	s.Close()

	s = mustOpenAt(t, path, []Feed{a, b}) // and added back
	if got := rebuildQueued(t, s); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("queued rebuilds %v after b came back, want [b]", got)
	}
	if got := feedRKeys(t, s, "b", "v1", postNSID); !slices.Equal(got, []string{"p1"}) {
		t.Errorf("feed b = %v, want [p1]", got)
	}
}
