package directory

import (
	"errors"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// A PLC directory that answers 429 is limiting us, not refusing the DID:
// every lookup waits out the time it asked for without asking it again,
// fails as ErrBusy (which costs a backfill no attempt) with the time left,
// and is not cached, so the first lookup after the pause asks. Before,
// each DID failed on its own with ErrUnavailable, cached for 30 s, and
// each one asked the PLC again (a review of PLC answers).
func TestAPLCRateLimitPausesEveryLookup(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "", pds1)
	plc.Add(bob, "", pds2)
	d, clk := newTestDirectory(t, plc, nil)
	plc.LimitDocuments(1, "7")

	_, err := d.LookupDID(t.Context(), alice)
	if !errors.Is(err, ErrBusy) || RetryAfter(err) != 7*time.Second {
		t.Fatalf("the lookup that met the 429: %v (retry after %v), want ErrBusy, 7s", err, RetryAfter(err))
	}
	clk.Advance(2 * time.Second)
	_, err = d.LookupDID(t.Context(), bob)
	if !errors.Is(err, ErrBusy) || RetryAfter(err) != 5*time.Second {
		t.Fatalf("another DID during the pause: %v (retry after %v), want ErrBusy, 5s", err, RetryAfter(err))
	}
	if n := plc.Requests(); n != 1 {
		t.Fatalf("the PLC was asked %d times during its pause, want only the first", n)
	}

	clk.Advance(5 * time.Second)
	for _, did := range []syntax.DID{alice, bob} {
		ident, err := d.LookupDID(t.Context(), did)
		if err != nil {
			t.Fatalf("%s after the pause: %v", did, err)
		}
		if ident.PDS == "" {
			t.Fatalf("%s after the pause: no PDS", did)
		}
	}
	if n := plc.Requests(); n != 3 {
		t.Fatalf("the PLC was asked %d times, want 3: the pause's failures are not cached", n)
	}
}

// A 429 that does not say how long, or says too long, pauses for the
// default or the bound; a cached answer is still served during a pause.
func TestAPLCPauseIsBoundedAndCachedAnswersStillServe(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "", pds1)
	plc.Add(bob, "", pds2)
	d, clk := newTestDirectory(t, plc, nil)
	if _, err := d.LookupDID(t.Context(), alice); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		retryAfter string
		want       time.Duration
	}{
		{"", defaultPause},
		{"86400", maxPause},
	} {
		plc.LimitDocuments(1, tc.retryAfter)
		_, err := d.LookupDID(t.Context(), bob)
		if got := RetryAfter(err); got != tc.want {
			t.Errorf("Retry-After %q: paused %v (%v), want %v", tc.retryAfter, got, err, tc.want)
		}
		if _, err := d.LookupDID(t.Context(), alice); err != nil {
			t.Errorf("Retry-After %q: a cached answer during the pause: %v", tc.retryAfter, err)
		}
		clk.Advance(tc.want)
	}
	if _, err := d.LookupDID(t.Context(), bob); err != nil {
		t.Fatalf("after the pauses: %v", err)
	}
}

// The handle resolver pauses on its own 503: handle lookups wait, and the
// PLC directory, another service, is still asked.
func TestAHandleResolverPauseLeavesThePLCAlone(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	plc.Add(bob, "bob.test", pds2)
	d, clk := newTestDirectory(t, plc, nil)
	plc.FailHandles(1)

	if _, err := d.LookupHandle(t.Context(), "alice.test"); !errors.Is(err, ErrBusy) {
		t.Fatalf("the lookup that met the 503: %v, want ErrBusy", err)
	}
	if _, err := d.LookupHandle(t.Context(), "bob.test"); !errors.Is(err, ErrBusy) {
		t.Fatalf("another handle during the pause: %v, want ErrBusy", err)
	}
	if n := plc.HandleRequests(); n != 1 {
		t.Fatalf("the resolver was asked %d times during its pause, want 1", n)
	}
	ident, err := d.LookupDID(t.Context(), bob)
	if err != nil || !ident.HandleUnchecked {
		t.Fatalf("a DID during the resolver's pause: %+v, %v; want its document, the handle unchecked", ident, err)
	}

	clk.Advance(defaultPause)
	if ident, err := d.LookupHandle(t.Context(), "alice.test"); err != nil || ident.DID != alice {
		t.Fatalf("after the pause: %+v, %v", ident, err)
	}
}

// Any other ErrBusy (too many lookups in flight) asks for a short wait;
// other errors leave the wait to the caller.
func TestRetryAfterOfOtherErrors(t *testing.T) {
	if got := RetryAfter(ErrBusy); got != busyRetry {
		t.Errorf("ErrBusy: %v, want %v", got, busyRetry)
	}
	if got := RetryAfter(ErrUnavailable); got != 0 {
		t.Errorf("ErrUnavailable: %v, want 0", got)
	}
}

// When a pause ends, one lookup probes the service and the others wait
// for its answer: the lookups deferred through the pause all come due at
// its end, and letting them all through sent a burst to a service that
// was likely still limiting us (a review of the pause).
func TestAPauseEndsWithOneProbe(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "", pds1)
	plc.Add(bob, "", pds2)
	d, clk := newTestDirectory(t, plc, nil)
	plc.LimitDocuments(1, "7")
	if _, err := d.LookupDID(t.Context(), alice); !errors.Is(err, ErrBusy) {
		t.Fatalf("the lookup that met the 429: %v", err)
	}

	clk.Advance(7 * time.Second)
	plc.Block()
	probe := make(chan error, 1)
	go func() {
		_, err := d.LookupDID(t.Context(), bob)
		probe <- err
	}()
	for plc.Requests() < 2 {
		time.Sleep(time.Millisecond)
	}
	_, err := d.LookupDID(t.Context(), alice)
	if !errors.Is(err, ErrBusy) || RetryAfter(err) != probeWait {
		t.Fatalf("a lookup while the probe is in flight: %v (retry after %v), want ErrBusy, %v", err, RetryAfter(err), probeWait)
	}
	if n := plc.Requests(); n != 2 {
		t.Fatalf("the PLC was asked %d times, want 2: the 429's lookup and the probe", n)
	}
	plc.Release()
	if err := <-probe; err != nil {
		t.Fatalf("the probe: %v", err)
	}
	if _, err := d.LookupDID(t.Context(), alice); err != nil {
		t.Fatalf("once the probe was answered: %v", err)
	}
}
