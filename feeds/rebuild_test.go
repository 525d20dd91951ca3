package feeds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// rebuildFixture stores five viewers who follow carol and dave, and six
// posts of theirs fanned out to every viewer, under a lane cap of 200; it
// then reopens the file with a cap of 3, the change a rebuild applies.
func rebuildFixture(t *testing.T) (*Store, []string) {
	t.Helper()
	path := t.TempDir() + "/appview.db"
	s := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds})
	ctx := context.Background()
	viewers := []string{"v1", "v2", "v3", "v4", "v5"}
	var changes []Change
	n := int64(1)
	for _, v := range viewers {
		if _, err := s.RegisterViewer(ctx, did(v), "following", time.Unix(1_000, 0)); err != nil {
			t.Fatal(err)
		}
		changes = append(changes, follow(v, "carol", "fc", n), follow(v, "dave", "fd", n+1))
		n += 2
	}
	for i := range 3 {
		changes = append(changes, post("carol", fmt.Sprintf("c%d", i), 100+2*int64(i)), post("dave", fmt.Sprintf("d%d", i), 101+2*int64(i)))
	}
	apply(t, s, changes...)
	if got := feedRKeys(t, s, "following", "v1", postNSID); len(got) != 6 {
		t.Fatalf("fixture: v1 has %v", got)
	}
	s.Close()
	capped := []Feed{{Name: "following", FollowCollection: followNSID, MergeLimit: 100, Targets: []Target{{Collection: postNSID, Cap: 3}}}}
	s = mustOpenWith(t, Options{Path: path, Feeds: capped})
	// v3 lost its items (say, a bad restore); v1 holds an item of no
	// record it should have (say, a bug).
	mustExec(t, s, `DELETE FROM feed_items WHERE viewer_id = (SELECT id FROM actors WHERE did = ?)`, string(did("v3")))
	mustExec(t, s, `INSERT INTO feed_items (viewer_id, target_id, sort_us, record_id)
		SELECT (SELECT id FROM actors WHERE did = ?), (SELECT id FROM feed_targets), 999, 0`, string(did("v1")))
	return s, viewers
}

var newestThree = []string{"d2", "c2", "d1"}

func TestRebuildFeedRefillsEveryViewerToTheCap(t *testing.T) {
	s, viewers := rebuildFixture(t)
	var reports []RebuildProgress
	p, err := s.RebuildFeed(context.Background(), "following", RebuildOptions{
		Chunk: 2, Progress: func(p RebuildProgress) { reports = append(reports, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range viewers {
		if got := feedRKeys(t, s, "following", v, postNSID); !slices.Equal(got, newestThree) {
			t.Errorf("%s after rebuild = %v, want %v", v, got, newestThree)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM feed_items`); n != 15 {
		t.Errorf("%d feed items, want 5 viewers × 3", n)
	}
	if p.Done != 5 || p.Total != 5 || p.Rows != 15 || p.Resumed {
		t.Errorf("result %+v", p)
	}
	var dones []int
	for _, r := range reports {
		dones = append(dones, r.Done)
	}
	if !slices.Equal(dones, []int{0, 2, 4, 5}) {
		t.Errorf("progress reports at %v, want 0, 2, 4, 5", dones)
	}
	if n := count(t, s, `SELECT count(*) FROM cursors WHERE kind LIKE 'rebuild:%'`); n != 0 {
		t.Errorf("a finished rebuild left %d position rows", n)
	}
}

// An interrupted rebuild keeps what it committed and its position; the
// next run starts at the next viewer.
// A chunk commits once it has held the write lock for Hold, whatever its
// count: here every reading of the clock is a second later, so each
// viewer takes the chunk past the bound and commits alone, and the feeds
// still come out whole.
func TestRebuildChunkCommitsOnceItHasHeldTheLockForHold(t *testing.T) {
	s, viewers := rebuildFixture(t)
	clock := time.Unix(5_000, 0)
	var dones []int
	p, err := s.RebuildFeed(context.Background(), "following", RebuildOptions{
		Chunk: 16, Hold: 500 * time.Millisecond,
		Now:      func() time.Time { clock = clock.Add(time.Second); return clock },
		Progress: func(p RebuildProgress) { dones = append(dones, p.Done) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dones, []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("progress reports at %v, want one commit a viewer", dones)
	}
	for _, v := range viewers {
		if got := feedRKeys(t, s, "following", v, postNSID); !slices.Equal(got, newestThree) {
			t.Errorf("%s after rebuild = %v, want %v", v, got, newestThree)
		}
	}
	if p.Done != 5 || p.Rows != 15 {
		t.Errorf("result %+v", p)
	}
}

func TestRebuildFeedResumesAfterInterruption(t *testing.T) {
	s, viewers := rebuildFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := s.RebuildFeed(ctx, "following", RebuildOptions{
		Chunk: 2,
		Progress: func(p RebuildProgress) {
			if p.Done >= 2 {
				cancel() // Ctrl-C after the first chunk committed
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted rebuild: %v", err)
	}
	for i, v := range viewers {
		got := feedRKeys(t, s, "following", v, postNSID)
		rebuilt := slices.Equal(got, newestThree)
		if rebuilt != (i < 2) {
			t.Errorf("%s after the interruption = %v (rebuilt %v, want %v)", v, got, rebuilt, i < 2)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM cursors WHERE kind = 'rebuild:following'
		AND seq = (SELECT id FROM actors WHERE did = 'did:plc:v2')`); n != 1 {
		t.Fatal("the position is not stored at the last viewer of the committed chunk")
	}

	var first *RebuildProgress
	p, err := s.RebuildFeed(context.Background(), "following", RebuildOptions{
		Chunk: 2,
		Progress: func(p RebuildProgress) {
			if first == nil {
				first = &p
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if first == nil || !first.Resumed || first.Done != 2 || first.Total != 5 {
		t.Errorf("resumed run started at %+v, want 2 of 5, resumed", first)
	}
	if p.Rows != 9 {
		t.Errorf("resumed run wrote %d rows, want 3 viewers × 3 (the first two were not redone)", p.Rows)
	}
	for _, v := range viewers {
		if got := feedRKeys(t, s, "following", v, postNSID); !slices.Equal(got, newestThree) {
			t.Errorf("%s after the resumed rebuild = %v", v, got)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM cursors WHERE kind = 'rebuild:following'`); n != 0 {
		t.Error("a finished rebuild left its position behind")
	}
}

func TestRebuildUnknownFeed(t *testing.T) {
	s := openViewerMode(t)
	if _, err := s.RebuildFeed(context.Background(), "nope", RebuildOptions{}); !errors.Is(err, ErrUnknownLane) {
		t.Errorf("unknown feed: %v", err)
	}
}

func TestReleaseFirstReadLetsAnotherOwnerClaimAtOnce(t *testing.T) {
	s := openViewerMode(t)
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	s.RegisterViewer(ctx, did("alice"), "following", now)
	if ok, _ := s.ClaimFirstRead(ctx, did("alice"), "following", "a", now, time.Minute); !ok {
		t.Fatal("first claim failed")
	}
	if err := s.ReleaseFirstRead(ctx, did("alice"), "following", "b"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.ClaimFirstRead(ctx, did("alice"), "following", "b", now, time.Minute); ok {
		t.Fatal("a release by a non-owner freed the claim")
	}
	if err := s.ReleaseFirstRead(ctx, did("alice"), "following", "a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.ClaimFirstRead(ctx, did("alice"), "following", "b", now, time.Minute); !ok {
		t.Fatal("a released claim was not free at once")
	}
	st, _ := s.RegisterViewer(ctx, did("alice"), "following", now)
	if st.Attempts != 0 {
		t.Errorf("a release counted an attempt: %+v", st)
	}
}

// In index_all mode every account whose follows are stored is a viewer,
// registered or not.
func TestRebuildFeedIndexAll(t *testing.T) {
	s := MustOpen(t, defaultFeeds)
	apply(t, s, follow("alice", "carol", "f1", 1), follow("bob", "carol", "f2", 2),
		post("carol", "p1", 3), post("carol", "p2", 4))
	mustExec(t, s, `DELETE FROM feed_items`)
	p, err := s.RebuildFeed(context.Background(), "following", RebuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Done != 2 || p.Total != 2 || p.Rows != 4 {
		t.Errorf("result %+v, want 2 viewers and 4 rows", p)
	}
	for _, v := range []string{"alice", "bob"} {
		if got := feedRKeys(t, s, "following", v, postNSID); !slices.Equal(got, []string{"p2", "p1"}) {
			t.Errorf("%s = %v", v, got)
		}
	}
}
