package xrpc

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/internal/testclock"
)

// hangingActors resolves alice.test at once and blocks every other handle
// until release is closed, counting the lookups it was asked.
type hangingActors struct {
	release chan struct{}
	asked   atomic.Int64
}

func (a *hangingActors) HandleCached(syntax.Handle) bool { return false }

func (a *hangingActors) ResolveHandle(ctx context.Context, h syntax.Handle) (syntax.DID, error) {
	a.asked.Add(1)
	if h == "alice.test" {
		return alice, nil
	}
	select {
	case <-a.release:
		return "", context.DeadlineExceeded
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// clientFrom is an HTTP client whose connections come from the loopback
// address local, a client of its own to the server. The test is skipped
// where local is not configured (only Linux has all of 127/8 by default).
func clientFrom(t *testing.T, local string) *http.Client {
	t.Helper()
	l, err := net.Listen("tcp", local+":0")
	if err != nil {
		t.Skipf("loopback address %s not usable here: %v", local, err)
	}
	l.Close()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) response {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: body}
}

// A client whose handle lookups hang holds its own share of lookups in
// flight, counted until each lookup ends, not its request: past it the
// client gets 429 with nothing looked up, while another client's getFeed
// by handle is still answered. Before, one client held all 256 of the
// directory's lookups and every other getFeed by handle answered 502 (a
// review of PLC answers).
func TestOneClientsHangingHandleLookupsLeaveOthersTheirShare(t *testing.T) {
	actors := &hangingActors{release: make(chan struct{})}
	cfg := testConfig(goldenReader())
	cfg.Actors = actors
	cfg.Timeouts = Timeouts{Write: 1500 * time.Millisecond} // lookups wait 500 ms
	const share = 4
	cfg.HandleLookups = HandleLookupLimits{ClientInFlight: share}
	base := serve(t, cfg)
	greedy, other := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")
	released := false
	defer func() {
		if !released {
			close(actors.release)
		}
	}()

	var wg sync.WaitGroup
	for i := range share {
		wg.Go(func() {
			h := "hang" + strings.Repeat("x", i+1) + ".test"
			if res := get(t, greedy, base+getFeedURL+"?feed=following&actor="+h); res.Status != http.StatusGatewayTimeout {
				t.Errorf("%s: status %d, want 504 once the request's wait ran out", h, res.Status)
			}
		})
	}
	wg.Wait()

	res := get(t, greedy, base+getFeedURL+"?feed=following&actor=alice.test")
	if res.Status != http.StatusTooManyRequests || decodeEnvelope(t, res.Body).Error != "RateLimitExceeded" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("the greedy client's next lookup: %d %s (Retry-After %q), want 429 RateLimitExceeded with Retry-After",
			res.Status, res.Body, res.Header.Get("Retry-After"))
	}
	if n := actors.asked.Load(); n != share {
		t.Fatalf("%d lookups asked, want the share's %d: a refused lookup asks nothing", n, share)
	}
	if res := get(t, other, base+getFeedURL+"?feed=following&actor=alice.test"); res.Status != http.StatusOK {
		t.Fatalf("another client, meanwhile: %d %s, want 200", res.Status, res.Body)
	}

	close(actors.release)
	released = true
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := get(t, greedy, base+getFeedURL+"?feed=following&actor=alice.test")
		if res.Status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the greedy client once its lookups ended: %d %s, want 200", res.Status, res.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// answeringActors resolves every handle to alice at once; cached.test is
// one the directory holds.
type answeringActors struct{ asked atomic.Int64 }

func (a *answeringActors) HandleCached(h syntax.Handle) bool { return h == "cached.test" }

func (a *answeringActors) ResolveHandle(context.Context, syntax.Handle) (syntax.DID, error) {
	a.asked.Add(1)
	return alice, nil
}

// A client's lookups of handles the directory has not cached draw on a
// bucket of their own: one asking for new handles as fast as it likes
// (its own domain can name a new did:plc for each) would have our PLC
// directory rate-limit us, and pause lookups for everyone. Past the
// bucket getFeed answers 429 with the wait for the next token; cached
// handles and other clients are still answered.
func TestAClientsNewHandlesAreRateLimited(t *testing.T) {
	actors := &answeringActors{}
	cfg := testConfig(goldenReader())
	cfg.Actors = actors
	s := NewServer(cfg)
	clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s.lookups = newLookupShares(HandleLookupLimits{ClientBurst: 3, ClientPerSecond: 1}, clk.Now)
	base := serveServer(t, s)
	client, other := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")
	feedOf := func(c *http.Client, h string) response {
		return get(t, c, base+getFeedURL+"?feed=following&actor="+h)
	}

	for i := range 3 {
		if res := feedOf(client, "new"+strings.Repeat("x", i+1)+".test"); res.Status != http.StatusOK {
			t.Fatalf("new handle %d of a burst of 3: %d %s", i, res.Status, res.Body)
		}
	}
	res := feedOf(client, "onemore.test")
	if res.Status != http.StatusTooManyRequests || decodeEnvelope(t, res.Body).Error != "RateLimitExceeded" || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("a fourth new handle: %d %s (Retry-After %q), want 429 RateLimitExceeded, Retry-After 1",
			res.Status, res.Body, res.Header.Get("Retry-After"))
	}
	if n := actors.asked.Load(); n != 3 {
		t.Fatalf("%d lookups asked, want 3: a refused one asks nothing", n)
	}
	if res := feedOf(client, "cached.test"); res.Status != http.StatusOK {
		t.Fatalf("a cached handle with the bucket empty: %d %s, want 200", res.Status, res.Body)
	}
	if res := feedOf(other, "onemore.test"); res.Status != http.StatusOK {
		t.Fatalf("another client's new handle: %d %s, want 200", res.Status, res.Body)
	}
	clk.Advance(time.Second)
	if res := feedOf(client, "onemore.test"); res.Status != http.StatusOK {
		t.Fatalf("a second later: %d %s, want 200", res.Status, res.Body)
	}
}

// All clients together hold at most the total of lookups in flight, so
// many clients' hanging lookups leave the directory's other callers (the
// backfill, profiles) their part: past it getFeed answers 503.
func TestHandleLookupsInFlightAreBoundedOverAllClients(t *testing.T) {
	actors := &hangingActors{release: make(chan struct{})}
	defer close(actors.release)
	cfg := testConfig(goldenReader())
	cfg.Actors = actors
	cfg.Timeouts = Timeouts{Write: 1500 * time.Millisecond} // lookups wait 500 ms
	s := NewServer(cfg)
	s.lookups.total = 2
	base := serveServer(t, s)
	for i, addr := range []string{"127.0.0.1", "127.0.0.2"} {
		h := "hang" + strings.Repeat("x", i+1) + ".test"
		if res := get(t, clientFrom(t, addr), base+getFeedURL+"?feed=following&actor="+h); res.Status != http.StatusGatewayTimeout {
			t.Fatalf("%s: %d %s, want 504 once the request's wait ran out", addr, res.Status, res.Body)
		}
	}
	res := get(t, clientFrom(t, "127.0.0.3"), base+getFeedURL+"?feed=following&actor=alice.test")
	if res.Status != http.StatusServiceUnavailable || decodeEnvelope(t, res.Body).Error != "NotEnoughResources" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("a third client with the total held: %d %s (Retry-After %q), want 503 NotEnoughResources with Retry-After",
			res.Status, res.Body, res.Header.Get("Retry-After"))
	}
}

// The buckets: a client's refused lookup is told the wait for its next
// token, the shared bucket refuses with 503 once all clients together
// used it up, and cached lookups draw on neither.
func TestLookupBuckets(t *testing.T) {
	clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newLookupShares(HandleLookupLimits{ClientBurst: 2, ClientPerSecond: 0.5, TotalBurst: 3, TotalPerSecond: 10}, clk.Now)
	take := func(client string, cached bool) *shareError {
		t.Helper()
		err := l.take(client, cached)
		if err == nil {
			l.release(client)
			return nil
		}
		se, ok := err.(*shareError)
		if !ok {
			t.Fatalf("%v is no *shareError", err)
		}
		return se
	}
	for range 2 {
		if se := take("a", false); se != nil {
			t.Fatalf("a within its burst: %v", se)
		}
	}
	if se := take("a", false); se == nil || se.status != http.StatusTooManyRequests || se.wait != 2*time.Second {
		t.Fatalf("a past its burst: %+v, want 429 and a wait of 2s (half a token a second)", se)
	}
	if se := take("a", true); se != nil {
		t.Fatalf("a cached lookup with the bucket empty: %v", se)
	}
	if se := take("b", false); se != nil {
		t.Fatalf("b's first: %v", se)
	}
	if se := take("c", false); se == nil || se.status != http.StatusServiceUnavailable || se.wait != 100*time.Millisecond {
		t.Fatalf("c with the shared bucket used up: %+v, want 503 and a wait of 100ms", se)
	}
	clk.Advance(100 * time.Millisecond)
	if se := take("c", false); se != nil {
		t.Fatalf("c once the shared bucket refilled a token: %v", se)
	}
}

// Past maxClients, clients with nothing in flight are forgotten, never
// one holding a lookup: its release would miss it, and the counts drift.
func TestForgettingClientsKeepsThoseWithLookupsInFlight(t *testing.T) {
	clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newLookupShares(HandleLookupLimits{}, clk.Now)
	l.maxClients = 3
	if err := l.take("holder", false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"spent", "idle"} {
		if err := l.take(c, false); err != nil {
			t.Fatal(err)
		}
		l.release(c)
	}
	if err := l.take("new", true); err != nil { // past maxClients: forget
		t.Fatal(err)
	}
	if _, ok := l.clients["holder"]; !ok {
		t.Fatal("the client holding a lookup was forgotten")
	}
	l.release("holder")
	l.release("new")
	if l.inflight != 0 || l.clients["holder"].held != 0 {
		t.Fatalf("after every release: %d in flight, holder holds %d; want 0, 0", l.inflight, l.clients["holder"].held)
	}
	if len(l.clients) > l.maxClients {
		t.Fatalf("%d clients remembered, want at most %d", len(l.clients), l.maxClients)
	}
}
