package xrpc

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// health serves GET /xrpc/_health, which atproto tooling polls. It answers
// as long as the process serves HTTP; it does not touch the database.
func (s *Server) health(c echo.Context) error {
	return writeJSON(c, http.StatusOK, struct {
		Version string `json:"version"`
	}{s.version})
}
