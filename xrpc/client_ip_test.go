package xrpc

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// clientRecorder is a ViewerGate that records the client key of each
// first read it is asked for: the key of the new-viewer limits.
type clientRecorder struct {
	mu      sync.Mutex
	clients []string
}

func (r *clientRecorder) Ensure(_ context.Context, _ syntax.DID, _, client string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients = append(r.clients, client)
	return nil
}

func (r *clientRecorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.clients) == 0 {
		return ""
	}
	return r.clients[len(r.clients)-1]
}

// Behind a reverse proxy every client's connection comes from the proxy,
// so the per-client limits on new viewers and handle lookups held all of
// them in one bucket. With http.trusted_proxies the client is the
// rightmost X-Forwarded-For address that is not a trusted proxy; without
// it, or from a peer that is not one, the header is never read, so a
// client cannot pick the key of its own limit.
func TestTheClientIsTheFirstAddressBeforeTheTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		xff     []string
		want    string
	}{
		{"no trusted proxy: the peer, whatever the header", nil, []string{"203.0.113.7"}, "127.0.0.1"},
		{"no header: the peer", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil, "127.0.0.1"},
		{"one trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, []string{"203.0.113.7"}, "203.0.113.7"},
		{"what the client wrote before the proxy's entry is not believed",
			[]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"198.51.100.1, 203.0.113.7"}, "203.0.113.7"},
		{"a chain of trusted proxies, over two headers",
			[]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")},
			[]string{"198.51.100.1, 203.0.113.7", "10.1.2.3"}, "203.0.113.7"},
		{"private addresses are trusted only when listed",
			[]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"203.0.113.7, 10.1.2.3"}, "10.1.2.3"},
		{"an unparsable entry: the peer", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"not-an-address"}, "127.0.0.1"},
		{"an empty entry: the peer", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"203.0.113.7,"}, "127.0.0.1"},
		// Some load balancers write a port; an address is one client
		// however it is written.
		{"an entry with a port", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"203.0.113.7:41234"}, "203.0.113.7"},
		{"a bracketed IPv6 entry with a port", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"a bracketed IPv6 entry", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"[2001:db8::1]"}, "2001:db8::1"},
		{"an entry with a zone", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"fe80::1%eth0"}, "fe80::1"},
		{"an IPv4 address mapped into IPv6", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"spaces, and a trusted hop written with a port",
			[]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")},
			[]string{" 203.0.113.7 ,10.0.0.2:8080 "}, "203.0.113.7"},
		{"every hop a trusted proxy: the farthest",
			[]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")},
			[]string{"10.0.0.1, 10.0.0.2"}, "10.0.0.1"},
		{"a peer that is not trusted: the peer", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, []string{"203.0.113.7"}, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := &clientRecorder{}
			cfg := testConfig(goldenReader())
			cfg.Viewers = gate
			cfg.TrustedProxies = tc.trusted
			base := serve(t, cfg)
			req, err := http.NewRequest(http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.xff {
				req.Header.Add("X-Forwarded-For", v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := gate.last(); got != tc.want {
				t.Errorf("client %q, want %q", got, tc.want)
			}
		})
	}
}

// The peer may be written as an IPv4 address mapped into IPv6 (a dual-stack
// listener), and still be the trusted proxy it is; and however many
// trusted hops a header lists, the walk stops after maxForwardedHops.
func TestClientIPReadsTheMappedPeerAndBoundsTheWalk(t *testing.T) {
	extract := clientIP([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "[::ffff:10.0.0.1]:1234"
	req.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.7")
	if got := extract(req); got != "203.0.113.7" {
		t.Errorf("behind a mapped peer: %q, want 203.0.113.7", got)
	}

	hops := []string{"203.0.113.7"}
	for i := 1; i <= 100; i++ {
		hops = append(hops, fmt.Sprintf("10.0.0.%d", i))
	}
	req.Header.Set("X-Forwarded-For", strings.Join(hops, ","))
	if got, want := extract(req), fmt.Sprintf("10.0.0.%d", 100-maxForwardedHops+1); got != want {
		t.Errorf("a padded header: %q, want the walk to stop at %s", got, want)
	}
}
