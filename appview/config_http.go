package appview

import (
	"net"
	"strconv"
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
}

func (c Config) validateHTTP(fail func(field, format string, args ...any)) {
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
// when either is a wildcard (":8080" covers "127.0.0.1:8080"). Port 0
// picks a free port each time, so two of them never collide. Other
// overlaps (a name and its address) fail at start, when the second
// listen does.
func sameListenAddress(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	return ha == hb || wildcardHost(ha) || wildcardHost(hb)
}

func wildcardHost(h string) bool {
	return h == "" || h == "0.0.0.0" || h == "::"
}
