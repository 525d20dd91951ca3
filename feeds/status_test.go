package feeds

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRecentSyncRuns(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 12 {
		run := SyncRun{Kind: "targets", Subject: string(did(fmt.Sprint("u", i))), Collection: postNSID, Outcome: "ok",
			Started: t0.Add(time.Duration(i) * time.Second), Duration: time.Millisecond}
		if err := s.RecordSyncRun(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := s.RecentSyncRuns(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 10 || runs[0].Subject != string(did("u11")) || runs[9].Subject != string(did("u2")) || runs[0].Duration != time.Millisecond {
		t.Fatalf("runs = %+v", runs)
	}
}

// The store keeps only the newest runs: one row per listing run and per
// stream session must not grow the table without end.
func TestSyncRunsAreBounded(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	s.syncRunsKept = 5
	ctx := context.Background()
	for i := range 12 {
		run := SyncRun{Kind: "jetstream", Subject: fmt.Sprint("host", i), Outcome: "error", Started: time.Unix(int64(i), 0)}
		if err := s.RecordSyncRun(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM sync_runs`); n != 5 {
		t.Errorf("%d sync runs kept, want 5", n)
	}
	runs, err := s.RecentSyncRuns(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 5 || runs[0].Subject != "host11" || runs[4].Subject != "host7" {
		t.Errorf("runs kept = %+v, want host11 to host7", runs)
	}
}

var twoFeeds = []Feed{
	{Name: "following", FollowCollection: followNSID, MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}, {Collection: "app.bsky.feed.repost", Cap: 200}}},
	{Name: "mutuals", FollowCollection: "com.example.graph.follow", MergeLimit: 100,
		Targets: []Target{{Collection: postNSID, Cap: 200}}},
}

func TestCounts(t *testing.T) {
	ctx := context.Background()
	for _, indexAll := range []bool{true, false} {
		t.Run(fmt.Sprint("index_all=", indexAll), func(t *testing.T) {
			s := mustOpenWith(t, Options{Path: t.TempDir() + "/appview.db", Feeds: twoFeeds, IndexAll: indexAll})
			if !indexAll {
				for _, v := range []string{"alice", "bob"} {
					if _, err := s.RegisterViewer(ctx, did(v), "following", time.Now()); err != nil {
						t.Fatal(err)
					}
				}
			}
			repost := post("carol", "r1", 4)
			repost.Collection = "app.bsky.feed.repost"
			apply(t, s, follow("alice", "carol", "f1", 1), follow("bob", "carol", "f2", 2),
				follow("bob", "dave", "f3", 3), post("carol", "p1", 4), post("dave", "p2", 5), repost)
			c, err := s.Counts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// p1 to alice and bob, p2 to bob, r1 to alice and bob.
			wantFeeds := []FeedCount{{Feed: "following", Viewers: 2, Items: 5}, {Feed: "mutuals"}}
			if fmt.Sprint(c.Feeds) != fmt.Sprint(wantFeeds) {
				t.Errorf("feeds = %+v, want %+v", c.Feeds, wantFeeds)
			}
			wantLanes := []LaneCount{{"following", postNSID, 3}, {"following", "app.bsky.feed.repost", 2}, {"mutuals", postNSID, 0}}
			if fmt.Sprint(c.Lanes) != fmt.Sprint(wantLanes) {
				t.Errorf("lanes = %+v, want %+v", c.Lanes, wantLanes)
			}
			if c.Follows != 3 || c.Targets != 3 {
				t.Errorf("follows %d, targets %d", c.Follows, c.Targets)
			}
		})
	}

	s := MustOpen(t, defaultFeeds)
	now := time.Unix(1_800_000_000, 0)
	page := &ListingPage{Account: did("carol"), Collection: postNSID, To: Listing{Host: "h", Round: 1, Page: 1, Complete: true}}
	if _, err := s.ApplyListingPage(ctx, page, now); err != nil {
		t.Fatal(err)
	}
	if err := s.FailListing(ctx, did("dave"), postNSID, Listing{Attempts: 2, LastError: "pds down"}, now); err != nil {
		t.Fatal(err)
	}
	c, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.Listings) != fmt.Sprint([]ListingCount{{"complete", 1}, {"failed", 1}}) ||
		len(c.Failures) != 1 || c.Failures[0].Account != string(did("dave")) || c.Failures[0].Error != "pds down" {
		t.Errorf("listings %+v, failures %+v", c.Listings, c.Failures)
	}
}

// The status page reads the sync runs on every request: a walk along the
// index, never a sort of the table. The counts avoid sorts too.
func TestStatusPlans(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	for _, tc := range []struct {
		query string
		args  []any
		index string
	}{
		{recentSyncRunsSQL, []any{10}, "sync_runs_by_start"},
		{`SELECT count(*) FROM (SELECT actor_id FROM follows WHERE collection_id = ? GROUP BY actor_id)`, []any{1}, "follows"},
	} {
		rows, err := s.reader.Query("EXPLAIN QUERY PLAN "+tc.query, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		got := strings.Join(plan, "; ")
		if !strings.Contains(got, tc.index) || strings.Contains(got, "TEMP B-TREE") {
			t.Errorf("plan of %s: %s", tc.query, got)
		}
	}
}
