// Package xrpc is the HTTP face of the appview: it serves the getFeed query,
// the probes, /status and /metrics (the last two on an admin server of
// their own when the operator wants them private, admin.go), and maps
// every failure to an XRPC error envelope.
package xrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/atfeeds/appview/feeds"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// FeedReader reads one page of a viewer's feed. *feeds.Store implements it;
// tests use a small in-memory fake.
type FeedReader interface {
	// ReadFeed returns a page whose items' values are valid JSON: the
	// response embeds them as they are.
	ReadFeed(ctx context.Context, q feeds.PageQuery) (feeds.Page, error)
}

// ActorResolver turns a handle into a DID, verified both ways. Its errors
// wrap the directory package's sentinels: ErrNotFound, ErrHandleMismatch,
// ErrInvalidDocument and ErrForbiddenPDS say the actor is unusable (400);
// directory.ErrBusy (a paused or saturated directory) is a 503 with
// Retry-After; anything else is taken as a failure of the directory
// upstream (502, or 504 past the deadline getFeed sets on ctx).
type ActorResolver interface {
	ResolveHandle(ctx context.Context, h syntax.Handle) (syntax.DID, error)
	// HandleCached reports whether ResolveHandle would answer h without
	// asking the network: such lookups cost a client none of its bucket
	// (handleshare.go).
	HandleCached(h syntax.Handle) bool
}

// ViewerGate runs a viewer's first read (registration and backfill)
// before its feed is read; it returns at once for known viewers, and
// stops waiting for a first read when ctx ends (getFeed's ctx ends before
// the write timeout), the feed then served as it is.
// client names the caller (its address) for per-client limits; a first
// read refused for load is a *backfill.RejectedError, answered with 429 or
// 503 and Retry-After.
type ViewerGate interface {
	Ensure(ctx context.Context, viewer syntax.DID, feed, client string) error
}

// ProfileSource hydrates the authors of a page (getFeed's profiles=true),
// waiting a short, bounded time for what it must fetch; *profiles.Service
// implements it.
type ProfileSource interface {
	Hydrate(ctx context.Context, dids []syntax.DID) ([]feeds.Profile, error)
}

// FeedSpec is one feed the server answers for.
type FeedSpec struct {
	// Name is the value of the feed query parameter.
	Name string
	// Collections are the target collections a client may ask for; the
	// first one is the default.
	Collections []syntax.NSID
	// Fields are the filters each collection declares (filters.go).
	Fields map[syntax.NSID][]feeds.Field
}

// Config is everything NewServer needs.
type Config struct {
	// Namespace is the NSID authority the methods live under, such as
	// "com.example.appview"; getFeed is served at /xrpc/<Namespace>.getFeed.
	Namespace string
	Feeds     []FeedSpec
	Reader    FeedReader
	// Actors resolves handle actors; nil answers handles with a 400.
	Actors ActorResolver
	// Viewers, when set, is called before every feed read.
	Viewers ViewerGate
	// Profiles, when set, hydrates profiles=true; nil (hydration off)
	// answers it with an empty list, as contrail does.
	Profiles ProfileSource
	// Version is reported by /xrpc/_health.
	Version string
	// Metrics is mounted at /metrics when non-nil.
	Metrics http.Handler
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
	// Registerer, when non-nil, receives the XRPC request metrics.
	Registerer prometheus.Registerer
	// Ready reports why the daemon cannot serve yet, or nil; /readyz
	// answers 503 with the reason or 200. Nil means always ready.
	Ready func(context.Context) error
	// Notify, when set, serves POST /xrpc/<Namespace>.notifyOfUpdate
	// behind NotifySecret (notify.go); nil answers it as an unknown method.
	Notify       Notifier
	NotifySecret string
	// Status, when set, serves GET /status with the JSON encoding of what
	// it returns (statuspage.go).
	Status func(context.Context) (any, error)
	// HandleLookups bounds getFeed's lookups of handle actors
	// (handleshare.go).
	HandleLookups HandleLookupLimits
	// FilterScanLimit bounds the feed rows a filtered getFeed page
	// examines; 0 means feeds.DefaultScanLimit.
	FilterScanLimit int
	// Timeouts bound how long a client may hold a connection; the zero
	// value keeps the defaults. Tests shorten them.
	Timeouts Timeouts
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client (clientIP). Empty: the connection's peer is the client.
	TrustedProxies []netip.Prefix
}

// Timeouts are the http.Server's timeouts. A zero field takes its default:
// ReadHeader 5s, Read 10s, Write 15s, Idle 60s.
type Timeouts struct {
	// ReadHeader bounds the request line and headers together, so a client
	// that dribbles header bytes (slowloris) is cut off.
	ReadHeader time.Duration
	// Read bounds the whole request, body included.
	Read time.Duration
	// Write bounds the response, from the end of the request headers.
	Write time.Duration
	// Idle bounds a keep-alive connection between requests.
	Idle time.Duration
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&t.ReadHeader, 5*time.Second)
	def(&t.Read, 10*time.Second)
	def(&t.Write, 15*time.Second)
	def(&t.Idle, 60*time.Second)
	return t
}

// Validate reports the first problem with cfg, naming the field.
func (cfg Config) Validate() error {
	if _, err := syntax.ParseNSID(cfg.Namespace + "." + getFeedName); err != nil {
		return fmt.Errorf("namespace: %q does not form a valid NSID: %w", cfg.Namespace, err)
	}
	if cfg.Reader == nil {
		return errors.New("reader: must be set")
	}
	if err := cfg.validateNotify(); err != nil {
		return err
	}
	seen := make(map[string]bool, len(cfg.Feeds))
	for i, f := range cfg.Feeds {
		if f.Name == "" {
			return fmt.Errorf("feeds[%d].name: must not be empty", i)
		}
		if seen[f.Name] {
			return fmt.Errorf("feeds[%d].name: duplicate feed %q", i, f.Name)
		}
		seen[f.Name] = true
		if len(f.Collections) == 0 {
			return fmt.Errorf("feeds[%d].collections: at least one collection is required", i)
		}
		for j, c := range f.Collections {
			if _, err := syntax.ParseNSID(string(c)); err != nil {
				return fmt.Errorf("feeds[%d].collections[%d]: %w", i, j, err)
			}
		}
	}
	return nil
}

// Server serves the XRPC API over its own http.Server; echo is only the
// handler.
type Server struct {
	logger   *slog.Logger
	reader   FeedReader
	actors   ActorResolver
	viewers  ViewerGate
	profiles ProfileSource
	feeds    map[string]FeedSpec
	version  string
	metrics  *metrics
	notify   *notifyMethod // nil when notifyOfUpdate is disabled
	// trustedProxies: see Config.TrustedProxies.
	trustedProxies []netip.Prefix
	// scanLimit bounds a filtered page's scan (Config.FilterScanLimit).
	scanLimit int
	// actorTimeout bounds a handle actor's resolution (actorLookupTimeout).
	actorTimeout time.Duration
	// lookups is each client's share of handle lookups (handleshare.go).
	lookups *lookupShares
	// firstReadBudget bounds, from the start of a getFeed, its wait for a
	// viewer's first read (firstReadDeadline).
	firstReadBudget time.Duration
	// pageBudget bounds, from the start of a getFeed, its page read and
	// profiles (pageDeadline).
	pageBudget time.Duration
	// inflight counts the handlers running (track), for Shutdown.
	inflight sync.WaitGroup

	// getFeedPath is the full request path of getFeed, "/xrpc/<ns>.getFeed".
	getFeedPath string

	echo *echo.Echo
	http *http.Server
	// silent holds connections that have not sent a whole request yet.
	silent silentConns
}

const (
	xrpcPrefix  = "/xrpc/"
	healthPath  = xrpcPrefix + "_health"
	getFeedName = "getFeed"
)

// NewServer builds the routes and the http.Server. It panics if cfg does not
// pass Validate: configuration is validated before the server is built.
func NewServer(cfg Config) *Server {
	if err := cfg.Validate(); err != nil {
		panic("xrpc: invalid config: " + err.Error())
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "xrpc")
	timeouts := cfg.Timeouts.withDefaults()

	s := &Server{
		logger:      logger,
		reader:      cfg.Reader,
		actors:      cfg.Actors,
		viewers:     cfg.Viewers,
		profiles:    cfg.Profiles,
		feeds:       make(map[string]FeedSpec, len(cfg.Feeds)),
		version:     cfg.Version,
		metrics:     newMetrics(cfg.Registerer),
		getFeedPath: xrpcPrefix + cfg.Namespace + "." + getFeedName,
		notify:      newNotifyMethod(cfg),
		scanLimit:   cfg.FilterScanLimit,
		// Derived from the write timeout so that a test shortening it
		// shortens the lookup too.
		actorTimeout:    actorLookupTimeout(timeouts.Write),
		lookups:         newLookupShares(cfg.HandleLookups, time.Now),
		firstReadBudget: firstReadDeadline(timeouts.Write),
		pageBudget:      pageDeadline(timeouts.Write),
		trustedProxies:  cfg.TrustedProxies,
	}
	for _, f := range cfg.Feeds {
		s.feeds[f.Name] = f
	}

	e := s.newEcho()
	e.Any("/xrpc/*", s.dispatch)
	mountProbes(e, cfg.Ready)
	e.GET(lexiconRoute, lexiconHandler(cfg.Namespace))
	mountOperator(e, cfg.Status, cfg.Metrics)
	s.serveWith(e, timeouts)
	return s
}

// newEcho is the router every Server starts from: errors leave as XRPC
// envelopes, panics are recovered, handlers are counted for Shutdown.
func (s *Server) newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.IPExtractor = clientIP(s.trustedProxies)
	// Metrics outermost so that recovered panics are counted as 500s.
	e.Use(s.track, s.measure, s.recoverPanics)
	return e
}

// mountProbes serves /readyz. Probes may use HEAD (some load balancers
// do): the health and readiness answers' statuses, without their bodies.
func mountProbes(e *echo.Echo, ready func(context.Context) error) {
	e.GET(readyPath, readyHandler(ready))
	e.HEAD(readyPath, readyHandler(ready))
}

// serveWith builds the http.Server that Serve and Shutdown run, around e.
func (s *Server) serveWith(e *echo.Echo, timeouts Timeouts) {
	s.echo = e
	s.http = &http.Server{
		Handler:           e,
		ReadHeaderTimeout: timeouts.ReadHeader,
		ReadTimeout:       timeouts.Read,
		WriteTimeout:      timeouts.Write,
		IdleTimeout:       timeouts.Idle,
		// Large enough that an absurd query string (a 100 KB actor) reaches
		// the router and gets an XRPC error instead of a bare 431.
		MaxHeaderBytes: 256 << 10,
		ErrorLog:       slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		ConnState:      s.silent.track,
	}
	s.http.RegisterOnShutdown(s.silent.closeAll)
}

// silentConns tracks connections in http.StateNew. http.Server.Shutdown
// waits for such a connection until it has been silent for more than 5s,
// so one client that connects and says nothing would make every graceful
// shutdown run into its deadline. At shutdown they are closed at once:
// they carry no request a handler has seen.
type silentConns struct {
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	shutdown bool
}

func (sc *silentConns) track(c net.Conn, st http.ConnState) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if st != http.StateNew {
		delete(sc.conns, c)
		return
	}
	if sc.shutdown {
		c.Close()
		return
	}
	if sc.conns == nil {
		sc.conns = make(map[net.Conn]struct{})
	}
	sc.conns[c] = struct{}{}
}

func (sc *silentConns) closeAll() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.shutdown = true
	for c := range sc.conns {
		c.Close()
	}
	clear(sc.conns)
}

// Handler returns the HTTP handler, for tests and for callers that run
// their own server.
func (s *Server) Handler() http.Handler { return s.echo }

// Serve accepts connections on l until Shutdown; it returns nil after
// Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.http.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for in-flight requests
// until ctx ends.
//
// A handler still running when ctx ends (a notifyOfUpdate fetching from
// slow PDSes) is not waited for beyond it: the connections are closed,
// which cancels the requests' contexts, and Shutdown waits a little more
// for the handlers to return, so that nothing writes to the store once
// the caller closes it. That ends the shutdown cleanly, logged, rather
// than failing the daemon's stop.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	s.logger.Warn("requests still running at shutdown: closing their connections")
	if err := s.http.Close(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(handlerStopWait):
		return fmt.Errorf("handlers still running %v after their connections closed", handlerStopWait)
	}
}

// handlerStopWait bounds Shutdown's wait for handlers whose connections
// it closed.
const handlerStopWait = 10 * time.Second

// track counts the handlers running, for Shutdown.
func (s *Server) track(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		s.inflight.Add(1)
		defer s.inflight.Done()
		return next(c)
	}
}

// route is the closed set of things a request can be, used both to
// dispatch and as the metrics label.
type route string

const (
	routeGetFeed route = "getFeed"
	routeHealth  route = "_health"
	routeOther   route = "other"
)

func (s *Server) routeOf(path string) route {
	switch path {
	case s.getFeedPath:
		return routeGetFeed
	case healthPath:
		return routeHealth
	}
	if s.notify.matches(path) {
		return routeNotify
	}
	return routeOther
}

// dispatch serves everything under /xrpc/. Doing it here rather than with
// one echo route per method keeps a wrong HTTP method on a known method
// (405) apart from an unknown method (501), whatever the router's
// precedence rules.
func (s *Server) dispatch(c echo.Context) error {
	r := c.Request()
	var h echo.HandlerFunc
	rt := s.routeOf(r.URL.Path)
	switch rt {
	case routeGetFeed:
		h = s.getFeed
	case routeHealth:
		h = s.health
	case routeNotify:
		// A procedure: POST with a body, checked by the method itself.
		return s.notify.serve(c)
	default:
		return &Error{
			Status:  http.StatusNotImplemented,
			Name:    "MethodNotImplemented",
			Message: "method not implemented: " + methodName(r.URL.Path),
		}
	}
	if r.Method == http.MethodHead && rt == routeHealth {
		return h(c) // a probe: net/http sends the status, not the body
	}
	if r.Method != http.MethodGet {
		allow := http.MethodGet
		if rt == routeHealth {
			allow = "GET, HEAD"
		}
		c.Response().Header().Set(echo.HeaderAllow, allow)
		return &Error{
			Status:  http.StatusMethodNotAllowed,
			Name:    "MethodNotAllowed",
			Message: "XRPC queries must use GET",
		}
	}
	// A query has no body. One that comes with a body is a confused (or
	// smuggling) client: refuse it rather than answer as if it were not
	// there. The handler never reads it; net/http discards what it can.
	if r.ContentLength != 0 && r.Body != http.NoBody {
		return invalidRequest("a request body was provided when none was expected")
	}
	return h(c)
}

// methodName is the NSID part of an /xrpc/ path, cut short so that a huge
// path does not end up in an error message.
func methodName(path string) string {
	name := strings.TrimPrefix(path, xrpcPrefix)
	const maxLen = 256 // longer than any valid NSID
	if len(name) > maxLen {
		name = name[:maxLen] + "…"
	}
	return strings.ToValidUTF8(name, "\uFFFD")
}
