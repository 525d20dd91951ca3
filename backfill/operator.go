package backfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// ErrClaimedElsewhere means another run holds the viewer's first-read
// claim: a daemon serving the viewer's read, or another command. It ends
// on its own, or its lease runs out.
var ErrClaimedElsewhere = errors.New("first read running elsewhere")

// ErrNotDue means the viewer's first read failed before and its retry
// schedule says not yet, or it gave up after MaxAttempts.
var ErrNotDue = errors.New("first read not due")

// FirstReadResult is what RunFirstRead did.
type FirstReadResult struct {
	// AlreadyComplete is set when the feed had had its first read.
	AlreadyComplete bool
	// Rows is the number of feed items the first read built.
	Rows int64
}

// RunFirstRead runs the first read of (viewer, feed) now and waits for
// it: what an operator preparing a feed asks for (`appview backfill`).
// It is the run a read starts, with the same claim, listings and limits:
// a running slot, the global and per-host request bounds, Depth and
// MaxFollows, the viewer's and each listing's retry schedule. Only the
// per-client admission bucket is skipped: the operator is no stranger.
//
// Every listing page is committed with its cursor, so a run whose ctx
// ends (Ctrl-C) gives its claim back and the next call goes on where it
// stopped. progress, when set, hears (done, total) as the followees'
// collections are fetched.
func (s *Service) RunFirstRead(ctx context.Context, viewer syntax.DID, feed string, progress func(done, total int)) (FirstReadResult, error) {
	if _, ok := s.feeds[feed]; !ok {
		return FirstReadResult{}, feeds.ErrUnknownLane
	}
	key := viewerKey{viewer, feed}
	now := s.cfg.Now()
	forgets := s.forgetsNow()
	st, err := s.store.RegisterViewer(ctx, viewer, feed, now)
	if err != nil {
		return FirstReadResult{}, fmt.Errorf("register viewer: %w", err)
	}
	switch {
	case st.Complete:
		s.markComplete(key, now, forgets)
		return FirstReadResult{AlreadyComplete: true}, nil
	case st.Attempts >= s.cfg.MaxAttempts:
		return FirstReadResult{}, fmt.Errorf("%w: gave up after %d attempts, last error: %s", ErrNotDue, st.Attempts, st.LastError)
	case now.Before(st.NextRetry):
		return FirstReadResult{}, fmt.Errorf("%w: failed %d times, next attempt after %s, last error: %s",
			ErrNotDue, st.Attempts, st.NextRetry.UTC().Format(time.RFC3339), st.LastError)
	}

	// Reads of this viewer in this process join the run, as they join one
	// a read started.
	s.mu.Lock()
	if _, running := s.running[key]; running {
		s.mu.Unlock()
		return FirstReadResult{}, ErrClaimedElsewhere
	}
	r := &firstRead{done: make(chan struct{})}
	s.running[key] = r
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, key)
		s.mu.Unlock()
		close(r.done)
	}()

	select {
	case s.admit.running <- struct{}{}:
		defer func() { <-s.admit.running }()
	case <-ctx.Done():
		r.err = ctx.Err()
		return FirstReadResult{}, r.err
	}
	rows, err := s.runFirstRead(ctx, key, progress)
	r.err = err
	return FirstReadResult{Rows: rows}, err
}
