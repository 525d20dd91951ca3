package xrpc

import (
	"errors"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the XRPC request metrics. A nil *metrics records nothing, so
// tests and callers without a registry need no setup.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "appview",
			Subsystem: "xrpc",
			Name:      "requests_total",
			Help:      "XRPC requests served, by method and HTTP status.",
		}, []string{"method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "appview",
			Subsystem: "xrpc",
			Name:      "request_duration_seconds",
			Help:      "Time to serve an XRPC request, by method.",
			Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method"}),
	}
	m.requests = register(reg, m.requests)
	m.duration = register(reg, m.duration)
	return m
}

// register registers c, or returns the collector already registered under
// the same description so that a second server on one registry shares it.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic("xrpc: register metrics: " + err.Error())
	}
	return c
}

// measure counts every request, labelled with a closed set of method
// names; the path itself never becomes a label.
func (s *Server) measure(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.metrics == nil {
			return next(c)
		}
		start := time.Now()
		if err := next(c); err != nil {
			// Write the error now so the status below is the real one.
			c.Error(err)
		}
		method := string(s.routeOf(c.Request().URL.Path))
		status := c.Response().Status
		s.metrics.requests.WithLabelValues(method, strconv.Itoa(status)).Inc()
		s.metrics.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
		return nil
	}
}
