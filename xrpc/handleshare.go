package xrpc

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/internal/tokenbucket"
)

// getFeed resolves handle actors before any admission, and the directory
// keeps 256 lookups in flight at most, failing the rest at once. A lookup
// goes on after the request stops waiting (its answer is cached for the
// retry), for up to the directory's timeout on each of its two steps. So
// one client asking for handles whose lookups hang held every slot, and
// every other client's getFeed by handle answered 502 meanwhile; and one
// asking for new handles as fast as it liked (its own domain can name a
// new did:plc for each) sent our PLC directory and handle resolver
// enough to rate-limit us, pausing lookups for everyone (reviews of PLC
// answers). So getFeed's lookups are shared out:
//   - each client (clientkey) has a share in flight, counted until the
//     lookup itself ends, not the request;
//   - all clients together have MaxHandleLookupsInFlight, half the
//     directory's, so other clients, a hundred /64s, cannot fill it
//     either, and the backfill and profiles keep the rest;
//   - each client's lookups that the directory has not cached draw on a
//     token bucket, and all clients' on one more, since a host given a
//     /56 is 256 clients; cached ones are free.
// The shares and buckets are HandleLookupLimits.
//
// Past a client's share or bucket getFeed answers 429, past the total
// or the shared bucket 503, each with a Retry-After, and nothing is
// looked up.

// HandleLookupLimits bounds getFeed's handle lookups (Config.HandleLookups).
// A zero field takes its default.
type HandleLookupLimits struct {
	// ClientInFlight is each client's share of lookups in flight (default
	// 16, at most MaxHandleLookupsInFlight). A cached handle's lookup
	// ends at once and hardly holds its place.
	ClientInFlight int
	// ClientBurst and ClientPerSecond shape each client's bucket of
	// lookups the directory has to ask the network for (default 60, 2).
	ClientBurst     int
	ClientPerSecond float64
	// TotalBurst and TotalPerSecond shape the bucket all clients' such
	// lookups share (default 200, 20).
	TotalBurst     int
	TotalPerSecond float64
}

func (l HandleLookupLimits) withDefaults() HandleLookupLimits {
	orDefault(&l.ClientInFlight, 16)
	l.ClientInFlight = min(l.ClientInFlight, MaxHandleLookupsInFlight)
	orDefault(&l.ClientBurst, 60)
	orDefault(&l.ClientPerSecond, 2)
	orDefault(&l.TotalBurst, 200)
	orDefault(&l.TotalPerSecond, 20)
	return l
}

// orDefault sets *v to d unless it is positive.
func orDefault[T int | float64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// MaxHandleLookupsInFlight bounds all getFeed's lookups at once: half of
// the directory's 256, so the backfill and profiles keep the rest.
const MaxHandleLookupsInFlight = 128

const (
	// maxLookupHold bounds how long a lookup the request stopped waiting
	// for keeps its client's place: the directory's two steps (handle,
	// then document) at its default 30 s each.
	maxLookupHold = time.Minute
	// maxLookupClients bounds the clients remembered (lookupShares.forget).
	maxLookupClients = 10_000
)

// lookupShares counts getFeed's handle lookups in flight, each client's
// and in all, and each client's bucket of uncached lookups. It is safe
// for concurrent use.
type lookupShares struct {
	perClient, total int
	// client and all are the buckets' shapes: each client's, and the one
	// all share.
	client, all tokenbucket.Shape
	now         func() time.Time
	maxClients  int

	mu       sync.Mutex
	inflight int
	shared   tokenbucket.Bucket
	clients  map[string]*clientLookups
}

type clientLookups struct {
	held   int
	tokens tokenbucket.Bucket
}

func newLookupShares(limits HandleLookupLimits, now func() time.Time) *lookupShares {
	limits = limits.withDefaults()
	all := tokenbucket.Shape{Burst: float64(limits.TotalBurst), PerSecond: limits.TotalPerSecond}
	return &lookupShares{
		perClient: limits.ClientInFlight, total: MaxHandleLookupsInFlight,
		client:     tokenbucket.Shape{Burst: float64(limits.ClientBurst), PerSecond: limits.ClientPerSecond},
		all:        all,
		now:        now,
		maxClients: maxLookupClients,
		shared:     tokenbucket.Full(all, now()),
		clients:    map[string]*clientLookups{},
	}
}

// shareError refuses a lookup: the status and Retry-After getFeed
// answers with.
type shareError struct {
	status int
	wait   time.Duration
	msg    string
}

func (e *shareError) Error() string { return e.msg }

// take holds a place for one of client's lookups, drawing a token unless
// cached; a *shareError when none may start.
func (l *lookupShares) take(client string, cached bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	c := l.clients[client]
	if c == nil {
		if len(l.clients) >= l.maxClients {
			l.forget(now)
		}
		c = &clientLookups{tokens: tokenbucket.Full(l.client, now)}
		l.clients[client] = c
	}
	c.tokens.Refill(l.client, now)
	l.shared.Refill(l.all, now)
	switch {
	case c.held >= l.perClient:
		return &shareError{http.StatusTooManyRequests, time.Second, "too many handle lookups in flight from this client"}
	case !cached && !c.tokens.Has():
		return &shareError{http.StatusTooManyRequests, c.tokens.Wait(l.client),
			fmt.Sprintf("too many new handles from this client: at most %g a second", l.client.PerSecond)}
	case l.inflight >= l.total:
		return &shareError{http.StatusServiceUnavailable, time.Second, "too many handle lookups in flight"}
	case !cached && !l.shared.Has():
		return &shareError{http.StatusServiceUnavailable, l.shared.Wait(l.all), "too many new handles asked for"}
	}
	if !cached {
		c.tokens.Take()
		l.shared.Take()
	}
	c.held++
	l.inflight++
	return nil
}

func (l *lookupShares) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	if c := l.clients[client]; c != nil {
		c.held--
	}
}

// forget makes room for a client: it drops the clients with nothing in
// flight whose buckets have refilled (forgetting them changes nothing),
// and if that is not enough every client with nothing in flight, whose
// buckets start full again.
func (l *lookupShares) forget(now time.Time) {
	for k, c := range l.clients {
		if c.held > 0 {
			continue
		}
		if c.tokens.Refill(l.client, now); c.tokens.IsFull(l.client) {
			delete(l.clients, k)
		}
	}
	if len(l.clients) < l.maxClients {
		return
	}
	for k, c := range l.clients {
		if c.held == 0 {
			delete(l.clients, k)
		}
	}
}

type lookupResult struct {
	did syntax.DID
	err error
}

// resolveHandleShared resolves h for client within its share, else fails
// with a *shareError and looks nothing up. The lookup runs on, detached
// from ctx, until it ends or maxLookupHold passes, holding the client's
// place; the caller waits for it until ctx ends.
func (s *Server) resolveHandleShared(ctx context.Context, client string, h syntax.Handle) (syntax.DID, error) {
	if err := s.lookups.take(client, s.actors.HandleCached(h)); err != nil {
		return "", err
	}
	done := make(chan lookupResult, 1)
	go func() {
		defer s.lookups.release(client)
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxLookupHold)
		defer cancel()
		did, err := s.actors.ResolveHandle(lctx, h)
		done <- lookupResult{did, err}
	}()
	select {
	case r := <-done:
		return r.did, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
