package appview

import (
	"time"

	"github.com/atfeeds/appview/xrpc"
)

// HandleLookupsConfig bounds getFeed's lookups of actors given as handles
// (xrpc/handleshare.go): they come before any admission, and each one
// the identity directory has not cached asks the network, our PLC
// directory or handle resolver included, which rate-limit us for all
// when asked too fast. A client is its remote address (an IPv6 /64):
// behind a reverse proxy every client is the proxy, so raise the client
// bounds to the service's.
type HandleLookupsConfig struct {
	// ClientInFlight bounds one client's lookups at once, each counted
	// until the lookup ends, not the request.
	ClientInFlight int `yaml:"client_in_flight"`
	// ClientInterval is the steady pace of new (uncached) handles one
	// client may have looked up: one per interval, ClientBurst at once.
	ClientInterval time.Duration `yaml:"client_interval"`
	ClientBurst    int           `yaml:"client_burst"`
	// TotalInterval and TotalBurst are that pace over all clients.
	TotalInterval time.Duration `yaml:"total_interval"`
	TotalBurst    int           `yaml:"total_burst"`
}

func defaultHandleLookups() HandleLookupsConfig {
	return HandleLookupsConfig{
		ClientInFlight: 16, ClientInterval: 500 * time.Millisecond, ClientBurst: 60,
		TotalInterval: 50 * time.Millisecond, TotalBurst: 200,
	}
}

// Upper bounds keep a typo from switching a bound off in effect.
func (h HandleLookupsConfig) validate(fail func(field, format string, args ...any)) {
	within := func(field string, n, lo, hi int) {
		if n < lo || n > hi {
			fail(field, "must be from %d to %d, got %d", lo, hi, n)
		}
	}
	within("xrpc.handle_lookups.client_in_flight", h.ClientInFlight, 1, xrpc.MaxHandleLookupsInFlight)
	within("xrpc.handle_lookups.client_burst", h.ClientBurst, 1, 1_000_000)
	within("xrpc.handle_lookups.total_burst", h.TotalBurst, 1, 1_000_000)
	for field, d := range map[string]time.Duration{
		"xrpc.handle_lookups.client_interval": h.ClientInterval,
		"xrpc.handle_lookups.total_interval":  h.TotalInterval,
	} {
		if d <= 0 || d > time.Hour {
			fail(field, "must be positive and at most 1h, got %s", d)
		}
	}
}

// limits translates the settings for package xrpc.
func (h HandleLookupsConfig) limits() xrpc.HandleLookupLimits {
	return xrpc.HandleLookupLimits{
		ClientInFlight:  h.ClientInFlight,
		ClientBurst:     h.ClientBurst,
		ClientPerSecond: 1 / h.ClientInterval.Seconds(),
		TotalBurst:      h.TotalBurst,
		TotalPerSecond:  1 / h.TotalInterval.Seconds(),
	}
}
