package feeds

import (
	"context"
	"testing"
	"time"
)

// TestKnownViewerFollowsTheTable: the in-memory set answers as the viewers
// table would, per feed, across a restart (loaded when the store opens)
// and after retirement.
func TestKnownViewerFollowsTheTable(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/appview.db"
	opts := Options{Path: path, Feeds: defaultFeeds}
	s := mustOpenWith(t, opts)
	if s.KnownViewer(did("alice"), "following") {
		t.Fatal("alice known before registering")
	}
	if _, err := s.RegisterViewer(ctx, did("alice"), "following", time.Unix(1_000, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RegisterViewer(ctx, did("bob"), "following", time.Unix(90_000, 0)); err != nil {
		t.Fatal(err)
	}
	if !s.KnownViewer(did("alice"), "following") || s.KnownViewer(did("alice"), "other") || s.KnownViewer(did("carol"), "following") {
		t.Error("after registering alice: wrong answers")
	}
	if _, err := s.RegisterViewer(ctx, did("dave"), "nonesuch", time.Unix(1_000, 0)); err == nil || s.KnownViewer(did("dave"), "nonesuch") {
		t.Error("a refused registration made a viewer")
	}
	s.Close()

	s = mustOpenWith(t, opts)
	if !s.KnownViewer(did("alice"), "following") || !s.KnownViewer(did("bob"), "following") {
		t.Fatal("viewers forgotten across a restart")
	}
	if n, err := s.RetireViewers(ctx, time.Unix(100_000, 0), 20*time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("retired %d (%v), want alice only", n, err)
	}
	if s.KnownViewer(did("alice"), "following") || !s.KnownViewer(did("bob"), "following") {
		t.Error("after retiring alice: wrong answers")
	}
}

// An operator command beside the daemon (appview backfill) registers
// viewers in the same file. The daemon's in-memory set learns of them at
// its next RefreshViewers, and only then reloads; its own registrations
// never make it reload (found by a review: a viewer the command prepared
// was taken for a new one, and charged to its client's bucket).
func TestViewersRegisteredByAnotherProcessAreLoaded(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/appview.db"
	daemon := mustOpenAt(t, path, defaultFeeds)
	command := mustOpenWith(t, Options{Path: path, Feeds: defaultFeeds, IndexAll: true, Existing: true})
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

	if _, err := daemon.RegisterViewer(ctx, did("own"), "following", now); err != nil {
		t.Fatal(err)
	}
	if reloaded, err := daemon.RefreshViewers(ctx); err != nil || reloaded {
		t.Fatalf("after its own registration the daemon reloaded (%v, %v)", reloaded, err)
	}

	if _, err := command.RegisterViewer(ctx, did("prepared"), "following", now); err != nil {
		t.Fatal(err)
	}
	// The daemon registers another before it refreshes: its commit sees
	// the version moved by other hands and leaves its own behind.
	if _, err := daemon.RegisterViewer(ctx, did("later"), "following", now); err != nil {
		t.Fatal(err)
	}
	if daemon.KnownViewer(did("prepared"), "following") {
		t.Fatal("known before any refresh: the test proves nothing")
	}
	if reloaded, err := daemon.RefreshViewers(ctx); err != nil || !reloaded {
		t.Fatalf("refresh after another process registered a viewer: %v, %v", reloaded, err)
	}
	for _, v := range []string{"own", "prepared", "later"} {
		if !daemon.KnownViewer(did(v), "following") {
			t.Errorf("%s is not known to the daemon after the refresh", v)
		}
	}
	if reloaded, err := daemon.RefreshViewers(ctx); err != nil || reloaded {
		t.Fatalf("a second refresh reloaded again (%v, %v)", reloaded, err)
	}
}
