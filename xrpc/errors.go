package xrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/labstack/echo/v4"
)

// Error is an XRPC error: an HTTP status plus the envelope
// {"error":Name,"message":Message}. Handlers return it; the central error
// handler writes it.
type Error struct {
	Status  int
	Name    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("xrpc %d %s: %s", e.Status, e.Name, e.Message)
}

// invalidRequest is the 400 every parameter problem maps to.
func invalidRequest(message string) *Error {
	return &Error{Status: http.StatusBadRequest, Name: "InvalidRequest", Message: message}
}

// notEnoughResources answers a request refused for load, or while the
// daemon stops: 503 NotEnoughResources with the seconds to wait in
// Retry-After, so that clients back off and ask again rather than fail.
func notEnoughResources(c echo.Context, retryAfter, message string) *Error {
	c.Response().Header().Set("Retry-After", retryAfter)
	return &Error{Status: http.StatusServiceUnavailable, Name: "NotEnoughResources", Message: message + "; retry later"}
}

// errInternal is what a client sees for anything that went wrong on our
// side; the details go to the log only.
var errInternal = &Error{
	Status:  http.StatusInternalServerError,
	Name:    "InternalServerError",
	Message: "internal server error",
}

// errRequestEnded answers a request whose context ended before it was
// answered: the client went away (or gave up waiting for its first read),
// or the server is shutting down. Nobody reads the answer; the status,
// nginx's "client closed request", keeps such requests out of the 5xx
// counts that alerts watch, and they are logged at debug level only.
var errRequestEnded = &Error{
	Status:  499,
	Name:    "RequestCanceled",
	Message: "the request ended before it was answered",
}

// failed is a handler's answer to err, a failure of its own: a 500, logged,
// unless the request itself ended first, which is likely what err is
// about (errRequestEnded).
func (s *Server) failed(c echo.Context, what string, err error, attrs ...any) *Error {
	attrs = append(attrs, "err", err)
	if c.Request().Context().Err() != nil {
		s.logger.Debug(what+": the request ended", attrs...)
		return errRequestEnded
	}
	s.logger.Error(what, attrs...)
	return errInternal
}

// envelope is the XRPC error body.
type envelope struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// handleError is echo's HTTPErrorHandler: every error, from our handlers,
// from echo's router (404, 405) or from a recovered panic, leaves as an
// XRPC envelope.
func (s *Server) handleError(err error, c echo.Context) {
	xe := s.toXRPC(err, c)
	if c.Response().Committed {
		// Headers are gone; all we can do is say so in the log.
		s.logger.Warn("error after response was committed", "path", c.Request().URL.Path, "err", err)
		return
	}
	if err := writeJSON(c, xe.Status, envelope{Error: xe.Name, Message: xe.Message}); err != nil {
		s.logger.Warn("write error response", "err", err)
	}
}

// toXRPC maps any error to an XRPC error, logging those that are our fault.
// 502 and 504 are an upstream's, logged where the upstream failed.
func (s *Server) toXRPC(err error, c echo.Context) *Error {
	var xe *Error
	if errors.As(err, &xe) {
		switch xe.Status {
		case http.StatusNotImplemented, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return xe
		}
		if xe.Status >= 500 && xe != errInternal && c.Request().Context().Err() == nil {
			s.logger.Error("request failed", "path", c.Request().URL.Path, "status", xe.Status, "err", err)
		}
		return xe
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg, ok := he.Message.(string)
		if !ok || msg == "" {
			msg = http.StatusText(he.Code)
		}
		switch {
		case he.Code == http.StatusNotFound:
			return &Error{Status: he.Code, Name: "NotFound", Message: msg}
		case he.Code == http.StatusMethodNotAllowed:
			return &Error{Status: he.Code, Name: "MethodNotAllowed", Message: msg}
		case he.Code == http.StatusRequestEntityTooLarge:
			return &Error{Status: he.Code, Name: "PayloadTooLarge", Message: msg}
		case he.Code >= 400 && he.Code < 500:
			return &Error{Status: he.Code, Name: "InvalidRequest", Message: msg}
		}
	}
	return s.failed(c, "request failed", err, "path", c.Request().URL.Path)
}

// recoverPanics turns a panic in a handler into a logged 500, so a client
// never sees a stack trace and the server keeps serving.
func (s *Server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler {
				// net/http's own signal to drop the connection.
				panic(r)
			}
			s.logger.Error("panic in handler", "path", c.Request().URL.Path, "panic", r, "stack", string(debug.Stack()))
			err = errInternal
		}()
		return next(c)
	}
}

// writeJSON encodes v into a buffer first, so an encoding failure can still
// become a 500 instead of half a body.
func writeJSON(c echo.Context, status int, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	return c.Blob(status, "application/json; charset=utf-8", buf.Bytes())
}
