package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrForbiddenAddress is the sentinel every refused destination matches with
// errors.Is. The concrete error is a *ForbiddenError naming the reason.
var ErrForbiddenAddress = errors.New("forbidden address")

// ForbiddenError reports a destination the client refused to connect to.
type ForbiddenError struct {
	// Host is the name or address as given (a URL host, or the dialed
	// "ip:port"); Addr is the IP that was checked, when there was one.
	Host   string
	Addr   netip.Addr
	Reason string
}

func (e *ForbiddenError) Error() string {
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		return fmt.Sprintf("egress: %s (%s) is %s: %v", e.Host, e.Addr, e.Reason, ErrForbiddenAddress)
	}
	return fmt.Sprintf("egress: %s is %s: %v", e.Host, e.Reason, ErrForbiddenAddress)
}

func (e *ForbiddenError) Unwrap() error { return ErrForbiddenAddress }

// ranges lists the destinations a stranger must not make us reach, with the
// reason reported. Order matters only for the reason: the first match wins.
var ranges = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation (TEST-NET-1)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation (TEST-NET-2)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation (TEST-NET-3)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	// The second IPv6 documentation prefix (RFC 9637), the discard-only
	// prefix (RFC 6666) and the benchmarking one (RFC 5180): never
	// publicly routed, and reused by private networks as 2001:db8::/32 is
	// (a review found them let through).
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // includes 255.255.255.255
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	// Forms that carry an IPv4 address a tunnel or translator may reach,
	// and that no PDS needs: 6to4 (deprecated, RFC 7526), Teredo, and
	// IPv4-compatible addresses (deprecated, RFC 4291). A review found
	// 2002:7f00:1::1 (127.0.0.1 over 6to4) let through.
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	// Local-use NAT64 (RFC 8215) may embed the IPv4 address at any of
	// RFC 6052's positions (prefix /48, /56, /64 …), not only in the last
	// 32 bits: it is meant for a network's own translators, and refused.
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
}

// translated are prefixes whose addresses reach the IPv4 address in their
// last 32 bits, so that address is what gets checked: the well-known NAT64
// prefix, and SIIT's IPv4-translated form.
var translated = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
}

// CheckAddr returns a *ForbiddenError when addr is not a public unicast
// address, and nil when connecting to it is fine.
func CheckAddr(addr netip.Addr) error {
	if reason := forbiddenReason(addr); reason != "" {
		return &ForbiddenError{Host: addr.String(), Addr: addr, Reason: reason}
	}
	return nil
}

func forbiddenReason(addr netip.Addr) string {
	if !addr.IsValid() {
		return "not an IP address"
	}
	addr = addr.Unmap().WithZone("")
	for _, p := range translated {
		if p.Contains(addr) {
			b := addr.As16()
			addr = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
			break
		}
	}
	for _, r := range ranges {
		if r.prefix.Contains(addr) {
			return r.reason
		}
	}
	return ""
}

// CheckHost checks a URL host (without port) that has not been resolved yet:
// an IP literal is checked as an address, and names that always mean this
// machine ("localhost", "*.localhost") are refused. Any other name passes
// here; the dialer checks the address it resolves to at connect time.
func CheckHost(host string) error {
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if addr, err := netip.ParseAddr(h); err == nil {
		if reason := forbiddenReason(addr); reason != "" {
			return &ForbiddenError{Host: host, Addr: addr, Reason: reason}
		}
		return nil
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return &ForbiddenError{Host: host, Reason: "loopback"}
	}
	return nil
}
