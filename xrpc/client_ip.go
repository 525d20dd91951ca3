package xrpc

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"
)

// maxForwardedHops bounds the X-Forwarded-For entries read for one
// request, all of them trusted proxies but the last: more is no real
// chain, only a header a client in a trusted range padded.
const maxForwardedHops = 64

// clientIP is how a request's client is told, the key of its rate limits
// (new viewers, handle lookups). With no trusted proxy it is the
// connection's peer, and X-Forwarded-For is never read: a client must not
// pick the key of its own limit. Behind trusted proxies it is the
// rightmost address of X-Forwarded-For (with the peer after it) that is
// not one of them: each proxy appends the address it saw, so what a
// client wrote itself lies to the left of what the first trusted proxy
// appended. Loopback, link-local and private addresses are trusted only
// when listed.
//
// An entry may carry a port ("203.0.113.7:41234", "[2001:db8::1]:443";
// some load balancers add one), a zone, or an IPv4 address mapped into
// IPv6; each is read as the bare address, so those clients keep buckets
// of their own (echo's ExtractIPFromXFFHeader, used before, took such an
// entry for unparsable and gave every client behind the proxy its
// address). An entry that is no address at all ("unknown", empty) stops
// the walk at the peer, whose entries it could not vouch for.
func clientIP(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	masked := make([]netip.Prefix, len(trusted))
	for i, p := range trusted {
		masked[i] = p.Masked()
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range masked {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(req *http.Request) string {
		host, _, err := net.SplitHostPort(req.RemoteAddr)
		if err != nil {
			host = req.RemoteAddr
		}
		peer, ok := parseForwarded(host)
		if !ok {
			return host
		}
		if !isTrusted(peer) {
			return peer.String()
		}
		headers := req.Header.Values(echo.HeaderXForwardedFor)
		client, hops := peer, 0
		for i := len(headers) - 1; i >= 0; i-- {
			rest := headers[i]
			for {
				entry := rest
				cut := strings.LastIndexByte(rest, ',')
				if cut >= 0 {
					entry, rest = rest[cut+1:], rest[:cut]
				}
				a, ok := parseForwarded(entry)
				if !ok {
					return peer.String()
				}
				client = a
				if !isTrusted(a) {
					return a.String()
				}
				if hops++; hops == maxForwardedHops {
					return a.String()
				}
				if cut < 0 {
					break
				}
			}
		}
		return client.String() // every hop a trusted proxy: the farthest
	}
}

// parseForwarded reads one address as a proxy or a peer writes it: bare,
// bracketed, or with a port; its zone dropped and an IPv4 address
// mapped into IPv6 unmapped, so one client has one key however written.
func parseForwarded(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
				return netip.Addr{}, false
			}
			if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil {
				return netip.Addr{}, false
			}
		} else {
			a = ap.Addr()
		}
	}
	return a.WithZone("").Unmap(), true
}
