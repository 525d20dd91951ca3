package xrpc

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// getFeed resolves handle actors before any admission, and the directory
// keeps 256 lookups in flight at most, failing the rest at once. A lookup
// goes on after the request stops waiting (its answer is cached for the
// retry), for up to the directory's timeout on each of its two steps. So
// one client asking for handles whose lookups hang held every slot, and
// every other client's getFeed by handle answered 502 meanwhile (a
// review of PLC answers). Each client (clientkey) now has a share of
// maxLookupsPerClient lookups, counted until the lookup itself ends, not
// the request; past it getFeed answers 429.

const (
	// maxLookupsPerClient is each client's share of handle lookups in
	// flight: a sixteenth of the directory's 256. A cached handle's
	// lookup ends at once and hardly holds its place.
	maxLookupsPerClient = 16
	// maxLookupHold bounds how long a lookup the request stopped waiting
	// for keeps its client's place: the directory's two steps (handle,
	// then document) at its default 30 s each.
	maxLookupHold = time.Minute
)

// lookupShares counts each client's handle lookups in flight. It is safe
// for concurrent use; a client with none holds no entry.
type lookupShares struct {
	max  int
	mu   sync.Mutex
	held map[string]int
}

func newLookupShares(max int) *lookupShares {
	return &lookupShares{max: max, held: map[string]int{}}
}

// take holds one of client's places, false when all are held.
func (l *lookupShares) take(client string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[client] >= l.max {
		return false
	}
	l.held[client]++
	return true
}

func (l *lookupShares) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[client]--; l.held[client] <= 0 {
		delete(l.held, client)
	}
}

type lookupResult struct {
	did syntax.DID
	err error
}

// errShareTaken fails a lookup not begun because its client's share of
// lookups in flight is taken.
var errShareTaken = errors.New("too many handle lookups in flight from this client")

// resolveHandleShared resolves h for client within its share, else fails
// with errShareTaken and looks nothing up. The lookup runs on, detached
// from ctx, until it ends or maxLookupHold passes, holding the client's
// place; the caller waits for it until ctx ends.
func (s *Server) resolveHandleShared(ctx context.Context, client string, h syntax.Handle) (syntax.DID, error) {
	if !s.lookups.take(client) {
		return "", errShareTaken
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
