package backfill

import (
	"context"
	"errors"
	"testing"

	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/pds/pdstest"
)

// A DID document may name one PDS host under many paths. A 429 from the
// host pauses it whatever path the next listing reaches it by: keyed by
// the whole endpoint, a path of its own was a host of its own, with its
// own pause and its own request slots. (Found by a review.)
func TestAHostsPathsShareItsPause(t *testing.T) {
	w := newWorld(t, Config{Concurrency: 1})
	a, b := w.account("a"), w.account("b")
	w.post(a, 1)
	w.post(b, 2)
	w.pds.Fail(a, postNSID, pdstest.FaultRateLimited) // Retry-After: 7 s
	ctx := context.Background()
	if _, err := w.svc.fetchPage(ctx, w.pds.URL(), a, postNSID, 10, ""); err == nil {
		t.Fatal("the rate-limited listing succeeded")
	}
	for _, endpoint := range []string{w.pds.URL() + "/b", w.pds.URL() + "/b/c"} {
		_, err := w.svc.fetchPage(ctx, endpoint, b, postNSID, 10, "")
		if !errors.Is(err, pds.ErrHostPaused) {
			// pds.ErrHostPaused is returned only for a request never sent.
			t.Errorf("listing through %s: %v, want the host's pause (no request)", endpoint, err)
		}
	}
}
