package directory

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/atfeeds/appview/internal/retryafter"
)

// The PLC directory and the handle resolver are services the daemon is
// configured with, shared by every lookup. One that answers 429 or 503 is
// limiting or shedding us as a whole, not refusing one DID: until the time
// it asked for (its Retry-After or RateLimit-Reset, else defaultPause;
// at most maxPause) no lookup is sent to it, and each fails at once with a
// *PausedError. That is an ErrBusy: it says nothing about the identity, is
// not cached, and costs a backfill listing or first read no attempt.
// Before, each DID failed on its own with ErrUnavailable, cached 30 s and
// counted as an attempt, and the PLC was asked again for every other DID
// (TestAPLCRateLimitPausesEveryLookup). Strangers' hosts (did:web, a
// handle's well-known) are not paused: one of them answering 429 must not
// stop lookups through the others.

const (
	// defaultPause is how long a paused service is left alone when its
	// answer did not say.
	defaultPause = 5 * time.Second
	// maxPause bounds what a service can ask: after it, one lookup
	// probes the service (pause) and pauses anew if it still limits.
	maxPause = time.Minute
	// busyRetry is when to ask again after a lookup refused because too
	// many were in flight.
	busyRetry = 5 * time.Second
)

// The services a pause is kept for, as PausedError.Service and
// Config.OnPause name them.
const (
	ServicePLC            = "PLC directory"
	ServiceHandleResolver = "handle resolver"
)

// PausedError fails a lookup while the service it needs asked us to wait,
// and the lookup whose answer asked it.
type PausedError struct {
	// Service names the paused service ("PLC directory", "handle resolver").
	Service string
	// Status is the answer that asked for the pause, 0 for a lookup that
	// was not sent.
	Status int
	// Left is the time left of the pause.
	Left time.Duration
}

func (e *PausedError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s answered %d: waiting %s", e.Service, e.Status, e.Left.Round(time.Second))
	}
	return fmt.Sprintf("%s asked us to wait: %s left", e.Service, e.Left.Round(time.Second))
}

// Unwrap makes a pause an ErrBusy (and so an ErrUnavailable).
func (e *PausedError) Unwrap() error { return ErrBusy }

// RetryAfter is how long to wait before looking up again after err: the
// time left of a pause, a few seconds after any other ErrBusy, and zero
// for every other error (the caller's own backoff then applies).
func RetryAfter(err error) time.Duration {
	var pe *PausedError
	if errors.As(err, &pe) {
		return pe.Left
	}
	if errors.Is(err, ErrBusy) {
		return busyRetry
	}
	return 0
}

// pause is one configured service's pause. It is safe for concurrent use.
//
// When a pause ends, one lookup (the probe) is sent, and the others go
// on failing with a *PausedError until it is answered: the listings and
// first reads that waited out the pause all come due at its end, and
// letting them all through sent up to MaxFetches requests to a service
// that was likely still limiting us (a review of this pause). An answer
// that asks no pause reopens the service to all; a 429 or 503 pauses it
// again; a probe that gets no answer within probeTimeout lets another
// lookup probe.
type pause struct {
	service string
	// probeTimeout is how long a probe holds the others back.
	probeTimeout time.Duration
	// onPause, when set, is told of each pause begun (Config.OnPause).
	onPause func(service string, status int, wait time.Duration)

	mu    sync.Mutex
	until time.Time
	// gen counts the pauses noted. A lookup's ticket carries the gen it
	// was admitted in, so an answer to a lookup sent before the latest
	// pause (many are in flight when a 429 comes) neither reopens the
	// service nor ends the probe: only the probe's own answer does.
	gen        uint64
	needsProbe bool      // a pause was noted and its probe has not been answered
	probeUntil time.Time // a probe is in flight until then
	// probes numbers the probes, so a probe given up on (past
	// probeTimeout) does not end its successor's turn when its answer
	// comes late.
	probes uint64
}

// ticket is what admit hands an admitted lookup, for answered.
type ticket struct {
	gen   uint64
	probe uint64 // the probe's number; 0 for a lookup that is no probe
}

// probeWait is the least time left a lookup is told while a probe is in
// flight.
const probeWait = time.Second

// probeLeft is the time left a lookup is told while a probe sent at
// probeUntil - probeTimeout is in flight: as long as the probe has been
// in flight, at least probeWait, and no longer than until another lookup
// may probe. The callers (listings, first reads) try again after it, each
// try a write; told a fixed second, they tried 30 times over a slow
// probe of 30 s, and now about 5 (a review of the pause).
func (p *pause) probeLeft(now time.Time) time.Duration {
	inFlight := now.Sub(p.probeUntil.Add(-p.probeTimeout))
	return min(max(probeWait, inFlight), p.probeUntil.Sub(now))
}

// admit says whether a lookup may be sent now: a *PausedError while the
// service is paused, or while another lookup probes it.
func (p *pause) admit(now time.Time) (ticket, error) {
	if p == nil {
		return ticket{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if left := p.until.Sub(now); left > 0 {
		return ticket{}, &PausedError{Service: p.service, Left: left}
	}
	if !p.needsProbe {
		return ticket{gen: p.gen}, nil
	}
	if now.Before(p.probeUntil) {
		return ticket{}, &PausedError{Service: p.service, Left: p.probeLeft(now)}
	}
	p.probeUntil = now.Add(p.probeTimeout)
	p.probes++
	return ticket{gen: p.gen, probe: p.probes}, nil
}

// answered notes the answer to the lookup admitted with t, status 0 when
// none came (a network error). A 429 or 503 pauses the service (its
// Retry-After or RateLimit-Reset, else defaultPause, at most maxPause)
// and returns the error for the lookup, whichever lookup it answered.
// Any other answer to the probe reopens the service; the probe's network
// error lets another lookup probe.
func (p *pause) answered(t ticket, status int, h http.Header, now time.Time) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	current := t.probe != 0 && t.probe == p.probes && t.gen == p.gen
	if current {
		p.probeUntil = time.Time{}
	}
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		if current && status != 0 {
			p.needsProbe = false
		}
		p.mu.Unlock()
		return nil
	}
	wait := retryafter.Parse(h, now, maxPause)
	if wait <= 0 {
		wait = defaultPause
	}
	// A pause begins unless one is running: the other lookups in flight
	// when it began meet the same limit, and only extend it.
	begun := !now.Before(p.until)
	if until := now.Add(wait); until.After(p.until) {
		p.until = until
	}
	if begun {
		p.gen++
		p.needsProbe, p.probeUntil = true, time.Time{}
	}
	left := p.until.Sub(now)
	p.mu.Unlock()
	if begun && p.onPause != nil {
		p.onPause(p.service, status, left)
	}
	return &PausedError{Service: p.service, Status: status, Left: left}
}
