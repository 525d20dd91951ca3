package xrpc

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// FuzzClientIP feeds the client's key any peer and X-Forwarded-For a
// hostile client or a misconfigured proxy may produce. The key is the
// peer itself when the peer is no trusted proxy, and otherwise the peer
// or an address one of the header's entries names, written canonically:
// never text a client wrote as it wrote it; and when the entry the peer
// appended is no trusted proxy, it is that entry, whatever came before.
func FuzzClientIP(f *testing.F) {
	for _, s := range [][2]string{
		{"10.0.0.1:80", "203.0.113.7"},
		{"[::ffff:10.0.0.1]:80", "198.51.100.1, 203.0.113.7:41234"},
		{"10.0.0.1:80", "[2001:db8::1]:443, fe80::1%eth0 , 10.0.0.2"},
		{"203.0.113.9:1", "10.0.0.5"},
		{"10.0.0.1:80", "unknown,,"},
		{"not-an-address", "203.0.113.7"},
		{"[fe80::1%lo]:9", "[::1]"},
	} {
		f.Add(s[0], s[1])
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	extract := clientIP(trusted)
	isTrusted := func(a netip.Addr) bool {
		return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	f.Fuzz(func(t *testing.T, remote, xff string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = remote
		req.Header["X-Forwarded-For"] = strings.Split(xff, "\n")
		got := extract(req)

		host, _, err := net.SplitHostPort(remote)
		if err != nil {
			return // no host:port, as net/http always writes it: a test's artefact
		}
		peer, ok := parseForwarded(host)
		if !ok {
			return
		}
		if !isTrusted(peer) {
			if got != peer.String() {
				t.Fatalf("peer %q is no trusted proxy, yet the client is %q", remote, got)
			}
			return
		}
		// What the trusted peer appended is believed over anything a
		// client wrote before it.
		headers := req.Header.Values("X-Forwarded-For")
		last := headers[len(headers)-1]
		if i := strings.LastIndexByte(last, ','); i >= 0 {
			last = last[i+1:]
		}
		if a, ok := parseForwarded(last); ok && !isTrusted(a) && got != a.String() {
			t.Fatalf("the proxy appended %q, yet the client is %q", last, got)
		}
		if got == peer.String() {
			return
		}
		a, ok := parseForwarded(got)
		if !ok || a.String() != got {
			t.Fatalf("client %q is no canonical address", got)
		}
		for _, e := range strings.FieldsFunc(xff, func(r rune) bool { return r == ',' || r == '\n' }) {
			if b, ok := parseForwarded(e); ok && b == a {
				return
			}
		}
		t.Fatalf("client %q is neither the peer %q nor an entry of %q", got, remote, xff)
	})
}
