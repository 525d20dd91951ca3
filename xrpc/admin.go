package xrpc

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
)

// AdminConfig is everything NewAdminServer needs: the operator's
// endpoints and the probes.
type AdminConfig struct {
	// Version is reported by /xrpc/_health.
	Version string
	// Metrics is mounted at /metrics when non-nil.
	Metrics http.Handler
	// Status, when set, serves GET /status (statuspage.go).
	Status func(context.Context) (any, error)
	// Ready answers /readyz, as Config.Ready does.
	Ready func(context.Context) error
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// Timeouts are the http.Server's, as Config.Timeouts.
	Timeouts Timeouts
}

// NewAdminServer builds a Server for a private address: /metrics and
// /status, which tell whoever reads them how big the network the daemon
// sees is and how far behind it runs, and the probes /xrpc/_health and
// /readyz, so that an orchestrator may probe either port. The caller
// builds its public Server without Metrics and Status; there they are
// then unknown paths (404). Admin requests are not counted in the XRPC
// request metrics: a scrape is not traffic.
func NewAdminServer(cfg AdminConfig) *Server {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{logger: logger.With("component", "xrpc", "listener", "admin"), version: cfg.Version}
	e := s.newEcho()
	e.GET(healthPath, s.health)
	e.HEAD(healthPath, s.health)
	mountProbes(e, cfg.Ready)
	mountOperator(e, cfg.Status, cfg.Metrics)
	s.serveWith(e, cfg.Timeouts.withDefaults())
	return s
}

// mountOperator serves /status and /metrics, each when its source is set.
func mountOperator(e *echo.Echo, status func(context.Context) (any, error), metrics http.Handler) {
	if status != nil {
		e.GET(statusPath, statusHandler(status))
	}
	if metrics != nil {
		e.GET("/metrics", echo.WrapHandler(metrics))
	}
}
