package directory

import (
	"errors"
	"net/http"
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
	for deadline := time.Now().Add(5 * time.Second); plc.Requests() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the probe never reached the PLC")
		}
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

// Config.OnPause hears of each pause begun, once, with the service, the
// status and the wait; lookups refused during it are not pauses.
func TestOnPauseHearsOfEachPause(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "", pds1)
	type heard struct {
		service string
		status  int
		wait    time.Duration
	}
	var got []heard
	d, _ := newTestDirectory(t, plc, func(c *Config) {
		c.OnPause = func(service string, status int, wait time.Duration) {
			got = append(got, heard{service, status, wait})
		}
	})
	plc.LimitDocuments(1, "7")
	for range 3 {
		d.LookupDID(t.Context(), alice)
	}
	if want := []heard{{ServicePLC, 429, 7 * time.Second}}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("heard %+v, want %+v", got, want)
	}
}

// Only the probe's own answer reopens a paused service or lets another
// lookup probe: many lookups are in flight when a 429 comes, and their
// late answers (a 200, a timeout) reopened it to all, or let a second
// probe through (a review of the probe).
func TestOnlyTheProbesAnswerEndsAPause(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var pauses int
	p := &pause{service: ServicePLC, probeTimeout: 30 * time.Second,
		onPause: func(string, int, time.Duration) { pauses++ }}
	admit := func() ticket {
		t.Helper()
		tk, err := p.admit(now)
		if err != nil {
			t.Fatalf("not admitted: %v", err)
		}
		return tk
	}
	refused := func(what string) {
		t.Helper()
		if _, err := p.admit(now); !errors.Is(err, ErrBusy) {
			t.Fatalf("%s: a lookup was admitted (%v)", what, err)
		}
	}
	limited := http.Header{"Retry-After": {"7"}}
	first, late200, lateTimeout, late429 := admit(), admit(), admit(), admit()
	if err := p.answered(first, 429, limited, now); !errors.Is(err, ErrBusy) {
		t.Fatalf("the 429: %v", err)
	}
	if err := p.answered(late429, 429, limited, now.Add(time.Second)); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second 429: %v", err)
	}
	if pauses != 1 {
		t.Fatalf("%d pauses heard, want 1: the late 429 only extends it", pauses)
	}

	now = now.Add(8 * time.Second)
	probe := admit()
	if probe.probe == 0 {
		t.Fatal("the first lookup after the pause is no probe")
	}
	refused("with the probe in flight")
	p.answered(late200, 200, nil, now)
	refused("after a late 200 from before the pause")
	p.answered(lateTimeout, 0, nil, now)
	refused("after a late timeout from before the pause")

	p.answered(probe, 0, nil, now) // the probe itself timed out
	second := admit()
	if second.probe == 0 {
		t.Fatal("after the probe's timeout, the next lookup is no probe")
	}
	refused("with the second probe in flight")
	now = now.Add(31 * time.Second) // past probeTimeout: given up on
	third := admit()
	if third.probe == 0 {
		t.Fatal("past the probe timeout, the next lookup is no probe")
	}
	p.answered(second, 0, nil, now) // the second probe's late answer
	refused("after the second probe's late answer, with the third in flight")
	p.answered(third, 200, nil, now)
	if tk := admit(); tk.probe != 0 {
		t.Fatal("after the probe's 200, lookups still probe")
	}
	admit()
}

// While a probe is in flight the others are told to wait as long as it
// has been in flight (at least a second), and never past the time another
// lookup may probe: a slow probe no longer has every deferred listing try
// again, with a write, every second until it is answered.
func TestLookupsWaitLongerTheLongerAProbeIsInFlight(t *testing.T) {
	p := &pause{service: ServicePLC, probeTimeout: 30 * time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := p.answered(ticket{}, http.StatusTooManyRequests, http.Header{"Retry-After": {"5"}}, t0); err == nil {
		t.Fatal("a 429 began no pause")
	}
	sent := t0.Add(5 * time.Second)
	if tk, err := p.admit(sent); err != nil || tk.probe == 0 {
		t.Fatalf("at the pause's end: ticket %+v, %v; want the probe", tk, err)
	}
	for _, tc := range []struct {
		after, left time.Duration
	}{
		{0, probeWait},
		{500 * time.Millisecond, probeWait},
		{4 * time.Second, 4 * time.Second},
		{20 * time.Second, 10 * time.Second}, // until another may probe
		{29 * time.Second, time.Second},
	} {
		_, err := p.admit(sent.Add(tc.after))
		if left := RetryAfter(err); !errors.Is(err, ErrBusy) || left != tc.left {
			t.Errorf("%s into the probe: %v (retry after %s), want ErrBusy after %s", tc.after, err, left, tc.left)
		}
	}
	if tk, err := p.admit(sent.Add(30 * time.Second)); err != nil || tk.probe != 2 {
		t.Fatalf("once the probe timed out: ticket %+v, %v; want the second probe", tk, err)
	}
}
