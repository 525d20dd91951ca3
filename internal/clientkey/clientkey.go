// Package clientkey names the client a request's limits are counted
// under, so every per-client bound (first-read admission, handle lookups)
// draws from the same key.
package clientkey

import "net/netip"

// Of is the key a client address counts under: an IPv6 address's /64, the
// smallest block a host is usually given, so one host cannot take a fresh
// share for each of its addresses (a review admitted 1,000 new viewers at
// once from one /64 with a burst of 1). IPv4 addresses, IPv4-mapped ones
// included, and anything that is not an address are their own key.
func Of(client string) string {
	addr, err := netip.ParseAddr(client)
	if err != nil || !addr.Is6() || addr.Is4In6() {
		return client
	}
	return netip.PrefixFrom(addr.WithZone(""), 64).Masked().String()
}
