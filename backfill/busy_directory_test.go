package backfill

import (
	"context"
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
