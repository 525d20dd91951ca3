package backfill

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory"
)

type failingResolver struct{ err error }

func (r failingResolver) LookupDID(context.Context, syntax.DID) (*directory.Identity, error) {
	return nil, r.err
}

// A directory refusing a lookup because too many are in flight says
// nothing about the account; a stranger's hanging hosts can bring it
// about, and each failure counted would push real listings towards
// MaxAttempts (raised by a review). It costs the listing no attempt; a
// directory that could not answer still does.
func TestABusyDirectoryCostsAListingNoAttempt(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Minute})
	ctx := context.Background()
	busy, down := w.account("busy"), w.account("down")
	for _, tc := range []struct {
		account  syntax.DID
		err      error
		attempts int
	}{
		{busy, directory.ErrBusy, 0},
		{down, directory.ErrUnavailable, 1},
	} {
		w.svc.resolver = failingResolver{tc.err}
		if err := w.svc.ensureAccount(ctx, tc.account, postNSID); err == nil {
			t.Fatalf("%s: the listing did not fail", tc.account)
		}
		st, err := w.store.ReadListing(ctx, tc.account, postNSID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Attempts != tc.attempts || st.NextRetry.IsZero() {
			t.Errorf("%s after %v: %+v, want %d attempts and a retry time", tc.account, tc.err, st, tc.attempts)
		}
	}
}

// A first read whose viewer the directory could not be asked about (the
// PLC paused us after its 429) learnt nothing about the viewer: it waits
// out the pause with no attempt counted, however many reads meet it, and
// reads in full once the directory answers. Counted, two such reads gave
// the viewer up (MaxAttempts 2) during the PLC's rate limit.
func TestAPausedDirectoryCostsAFirstReadNoAttempt(t *testing.T) {
	w := newWorld(t, Config{RetryBase: time.Second, MaxAttempts: 2})
	viewer, acct := w.account("viewer"), w.account("acct")
	w.follow(viewer, acct, 1)
	w.post(acct, 2)
	ctx := context.Background()
	working := w.svc.resolver
	w.svc.resolver = failingResolver{&directory.PausedError{Service: "PLC directory", Status: 429, Left: 7 * time.Second}}
	for i := range 4 {
		if err := w.svc.Ensure(ctx, viewer, "following", "c"); err != nil {
			t.Fatal(err)
		}
		st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock)
		if st.Attempts != 0 || st.Complete {
			t.Fatalf("read %d during the pause: %+v, want no attempt counted and not complete", i, st)
		}
		// Not due again before the pause ends: a read within it asks
		// nothing.
		w.svc.resolver = failingResolver{errors.New("asked during the pause")}
		w.advance(6 * time.Second)
		if err := w.svc.Ensure(ctx, viewer, "following", "c"); err != nil {
			t.Fatal(err)
		}
		if st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock); st.Attempts != 0 {
			t.Fatalf("read %d within the pause asked again: %+v", i, st)
		}
		w.svc.resolver = failingResolver{&directory.PausedError{Service: "PLC directory", Left: 7 * time.Second}}
		w.advance(2 * time.Second)
		w.svc.forgetComplete()
	}
	w.svc.resolver = working
	if err := w.svc.Ensure(ctx, viewer, "following", "c"); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.store.RegisterViewer(ctx, viewer, "following", w.clock); !st.Complete || st.Attempts != 0 {
		t.Fatalf("once the directory answers: %+v, want complete with no attempt counted", st)
	}
}

// A listing that met a paused directory waits out the pause, neither
// coming due into it nor waiting the retry schedule's step past it.
func TestAListingWaitsOutADirectoryPause(t *testing.T) {
	for _, step := range []time.Duration{time.Second, time.Minute} {
		w := newWorld(t, Config{RetryBase: step})
		ctx := context.Background()
		account := w.account("paused")
		w.svc.resolver = failingResolver{&directory.PausedError{Service: "PLC directory", Left: 30 * time.Second}}
		if err := w.svc.ensureAccount(ctx, account, postNSID); err == nil {
			t.Fatal("the listing did not fail")
		}
		st, err := w.store.ReadListing(ctx, account, postNSID)
		if err != nil {
			t.Fatal(err)
		}
		if want := w.clock.Add(30 * time.Second); st.Attempts != 0 || !st.NextRetry.Equal(want) {
			t.Fatalf("retry step %v: %+v, want no attempt and a retry at the pause's end (%s)", step, st, want)
		}
	}
}
