package appview

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Series of the jetstream package that prove a connection was made: the
// connected gauge (1 while a session is open) and the byte counter (only
// a session reads bytes). The readiness test runs a real jetstream.Client,
// so a rename there fails it.
const (
	connectedMetric     = "appview_jetstream_connected"
	bytesReceivedMetric = "appview_jetstream_bytes_received_total"
)

// errNotConnected is what /readyz reports until the consumer has connected.
var errNotConnected = errors.New("jetstream: not connected yet")

// readiness answers /readyz. The database part holds by construction:
// Build opens the database and runs its migrations before it builds the
// XRPC server, and Close runs only after the server has shut down. What
// remains is the consumer, which must have connected at least once since
// start; after that the daemon stays ready through reconnects, because
// feeds can still be read while Jetstream is away (cursor lag says how
// stale they are).
//
// The jetstream package has no connect callback, so readiness reads its
// metrics from the daemon's registry and latches the first sign of a
// connection. A session that opened and closed without a single frame
// between two probes goes unnoticed; the next one is seen.
type readiness struct {
	gather    prometheus.Gatherer
	consumes  bool // false when no feeds are configured: nothing to connect to
	connected atomic.Bool
}

// newReadiness returns the readiness of a daemon whose metrics are in g.
// consumes is whether the daemon subscribes to Jetstream at all.
func newReadiness(g prometheus.Gatherer, consumes bool) *readiness {
	return &readiness{gather: g, consumes: consumes}
}

// Check returns nil when the daemon is ready to serve feeds, else the
// reason it is not. It is the xrpc.Config Ready hook.
func (r *readiness) Check(ctx context.Context) error {
	if !r.consumes || r.connected.Load() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	families, err := r.gather.Gather()
	if err != nil && len(families) == 0 {
		return err
	}
	for _, mf := range families {
		switch mf.GetName() {
		case connectedMetric:
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() > 0 {
					r.connected.Store(true)
				}
			}
		case bytesReceivedMetric:
			for _, m := range mf.GetMetric() {
				if m.GetCounter().GetValue() > 0 {
					r.connected.Store(true)
				}
			}
		}
	}
	if !r.connected.Load() {
		return errNotConnected
	}
	return nil
}
