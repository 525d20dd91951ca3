package xrpc

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// statusPath is the operator's status page: where the stream cursor
// stands, how big the feeds are, how the backfill and the sweep are doing.
// Its content comes from the Status hook (the appview package builds it).
const statusPath = "/status"

// statusTimeout bounds one status answer; the hook serves counts from a
// cache, so only a few indexed reads remain.
const statusTimeout = 5 * time.Second

// statusHandler serves GET /status as the JSON encoding of what status
// returns. The page is for operators and monitors, not an XRPC method, but
// a failure still leaves as an XRPC envelope.
func statusHandler(status func(context.Context) (any, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), statusTimeout)
		defer cancel()
		v, err := status(ctx)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return writeJSON(c, http.StatusOK, v)
	}
}
