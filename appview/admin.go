package appview

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/atfeeds/appview/xrpc"
)

// splitAdmin builds the admin server when http.admin_listen is set, and
// takes /metrics and /status off xcfg, the public server's config: an
// operator sets the key to keep them off the address the internet
// reaches. The probes stay on both. Off, it returns nil and xcfg is
// unchanged.
func splitAdmin(cfg Config, xcfg *xrpc.Config, log *slog.Logger) *xrpc.Server {
	if cfg.HTTP.AdminListen == "" {
		return nil
	}
	admin := xrpc.NewAdminServer(xrpc.AdminConfig{
		Version:  xcfg.Version,
		Metrics:  xcfg.Metrics,
		Status:   xcfg.Status,
		Ready:    xcfg.Ready,
		Logger:   log,
		Timeouts: xcfg.Timeouts,
	})
	xcfg.Metrics, xcfg.Status = nil, nil
	return admin
}

// listenAdmin opens http.admin_listen, or returns nil when it is off.
func listenAdmin(cfg Config) (net.Listener, error) {
	if cfg.HTTP.AdminListen == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", cfg.HTTP.AdminListen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (http.admin_listen): %w", cfg.HTTP.AdminListen, err)
	}
	return l, nil
}

// httpShutdownTimeout bounds each server's graceful shutdown; the public
// and admin servers shut down side by side, so a stop waits for the
// slower of the two, not their sum.
const httpShutdownTimeout = 5 * time.Second

// serveHTTP runs srv on l in g until gctx ends, then shuts it down with a
// fresh timeout (gctx is already cancelled by then).
func serveHTTP(g *errgroup.Group, gctx context.Context, name string, srv *xrpc.Server, l net.Listener) {
	g.Go(func() error { return named(name, srv.Serve(l)) })
	g.Go(func() error {
		<-gctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(gctx), httpShutdownTimeout)
		defer cancel()
		return named(name+" shutdown", srv.Shutdown(shutdownCtx))
	})
}
