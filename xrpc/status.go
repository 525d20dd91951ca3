package xrpc

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// readyPath is the readiness probe. /xrpc/_health is liveness: it answers
// while the process serves HTTP. /readyz answers 200 only once the daemon
// can do its job, so that an orchestrator or load balancer waits for it.
const readyPath = "/readyz"

// readyTimeout bounds one readiness check; a probe must answer quickly
// even when the check hangs.
const readyTimeout = 2 * time.Second

// readyResponse is the body of /readyz: {"status":"ready"}, or
// {"status":"not ready","reason":…} with a 503.
type readyResponse struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// readyHandler serves GET /readyz from the Ready hook; a nil hook is
// always ready.
func readyHandler(ready func(context.Context) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		if ready != nil {
			ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
			defer cancel()
			if err := ready(ctx); err != nil {
				// Written here rather than returned: not being ready yet
				// is an answer, not a server error to log.
				return writeJSON(c, http.StatusServiceUnavailable, readyResponse{Status: "not ready", Reason: err.Error()})
			}
		}
		return writeJSON(c, http.StatusOK, readyResponse{Status: "ready"})
	}
}
