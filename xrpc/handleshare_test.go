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
)

// hangingActors resolves alice.test at once and blocks every other handle
// until release is closed, counting the lookups it was asked.
type hangingActors struct {
	release chan struct{}
	asked   atomic.Int64
}

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
// address local, a client of its own to the server.
func clientFrom(local string) *http.Client {
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
	base := serve(t, cfg)
	greedy, other := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	released := false
	defer func() {
		if !released {
			close(actors.release)
		}
	}()

	var wg sync.WaitGroup
	for i := range maxLookupsPerClient {
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
	if n := actors.asked.Load(); n != maxLookupsPerClient {
		t.Fatalf("%d lookups asked, want the share's %d: a refused lookup asks nothing", n, maxLookupsPerClient)
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
