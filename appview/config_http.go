package appview

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// HTTPConfig describes the HTTP listeners.
type HTTPConfig struct {
	// Listen serves the XRPC API, the probes and, unless AdminListen is
	// set, /metrics and /status.
	Listen string `yaml:"listen"`
	// AdminListen, when set, serves /metrics and /status (and the probes
	// again) on an address of their own, and Listen no longer serves
	// them: an operator who exposes the XRPC port to the internet keeps
	// the network's size and the daemon's lag on a private address.
	AdminListen string `yaml:"admin_listen"`
	// TrustedProxies are the reverse proxies (addresses or CIDR prefixes)
	// in front of Listen whose X-Forwarded-For names the client: the key
	// of the per-client limits on new viewers and handle lookups. Empty,
	// the connection's peer is the client and the header is never read,
	// so behind a proxy every client is the proxy.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// maxTrustedProxies bounds http.trusted_proxies: each request's client is
// matched against every entry.
const maxTrustedProxies = 64

// trustedProxies parses http.trusted_proxies; Validate has checked it.
func (h HTTPConfig) trustedProxies() []netip.Prefix {
	var out []netip.Prefix
	for _, raw := range h.TrustedProxies {
		if p, err := parseProxy(raw); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parseProxy reads an address (a prefix of its full length) or a CIDR
// prefix, whose host bits must be zero: "10.0.0.1/8" is likely a typo for
// a single address, and would trust the whole network.
func parseProxy(raw string) (netip.Prefix, error) {
	if !strings.Contains(raw, "/") {
		a, err := netip.ParseAddr(raw)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("an address with a zone is not supported")
		}
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(raw)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("host bits set: did you mean %s?", p.Masked())
	}
	if p.Bits() == 0 {
		return netip.Prefix{}, fmt.Errorf("trusts every address: any client could then name its own address")
	}
	return p, nil
}

func (c Config) validateHTTP(fail func(field, format string, args ...any)) {
	if len(c.HTTP.TrustedProxies) > maxTrustedProxies {
		fail("http.trusted_proxies", "at most %d entries, got %d", maxTrustedProxies, len(c.HTTP.TrustedProxies))
	}
	for i, raw := range c.HTTP.TrustedProxies {
		if _, err := parseProxy(raw); err != nil {
			fail(fmt.Sprintf("http.trusted_proxies[%d]", i), "%q: want an address or a CIDR prefix such as 10.0.0.0/8 (%v)", raw, err)
		}
	}
	listenOK := checkListen(fail, "http.listen", c.HTTP.Listen, ":8080")
	if c.HTTP.AdminListen == "" {
		return
	}
	if checkListen(fail, "http.admin_listen", c.HTTP.AdminListen, "127.0.0.1:9090") && listenOK &&
		sameListenAddress(c.HTTP.Listen, c.HTTP.AdminListen) {
		fail("http.admin_listen", "%q: must differ from http.listen (%q)", c.HTTP.AdminListen, c.HTTP.Listen)
	}
}

// checkListen reports whether addr is a host:port the daemon can listen
// on, failing key otherwise.
func checkListen(fail func(field, format string, args ...any), key, addr, example string) bool {
	if addr == "" {
		fail(key, "must not be empty")
		return false
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		fail(key, "must be host:port, such as %s (%v)", example, err)
		return false
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		fail(key, "port %q: must be a number from 0 to 65535", port)
		return false
	}
	return true
}

// sameListenAddress reports whether two valid listen addresses would
// claim the same port: the same port on the same host, or on any host
// when either is a wildcard (":8080" covers "127.0.0.1:8080"). Hosts
// are compared as addresses where they can be without a lookup, so
// "::ffff:127.0.0.1" is "127.0.0.1", and "localhost" is 127.0.0.1, the
// address Go listens on for it (a name's IPv4 address first): validation
// must not depend on DNS, and a clash it misses only shows at start, when
// the second listen fails. Ports compare as numbers ("08080" is 8080).
// Port 0 picks a free port each time, so two of them never collide.
// Other overlaps (a name and its address) still fail at start.
func sameListenAddress(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, _ := strconv.ParseUint(pa, 10, 16)
	nb, _ := strconv.ParseUint(pb, 10, 16)
	if na != nb || na == 0 {
		return false
	}
	if strings.EqualFold(ha, hb) || wildcardHost(ha) || wildcardHost(hb) {
		return true
	}
	x, okx := hostAddr(ha)
	y, oky := hostAddr(hb)
	return okx && oky && x == y
}

// wildcardHost reports whether a listen host means every address: empty,
// or an unspecified address however written ("0.0.0.0", "::", "0::0",
// "::ffff:0.0.0.0").
func wildcardHost(h string) bool {
	if h == "" {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsUnspecified()
}

// hostAddr returns the address a listen host stands for without a
// lookup: an IP literal in one canonical form (IPv4-mapped IPv6 as IPv4),
// or 127.0.0.1 for "localhost": net.Listen binds one address of a name,
// its IPv4 one where it has one, so "localhost:8080" and "[::1]:8080"
// both listen (checked on Linux). It reports false for any other name.
func hostAddr(h string) (netip.Addr, bool) {
	if strings.EqualFold(h, "localhost") {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), true
	}
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}
