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
