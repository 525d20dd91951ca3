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

	mu         sync.Mutex
	until      time.Time
	needsProbe bool      // a pause was noted and no answer since reopened
	probeUntil time.Time // a probe is in flight until then
}

// probeWait is the time left a lookup is told while a probe is in
// flight.
const probeWait = time.Second

// admit says whether a lookup may be sent now: a *PausedError while the
// service is paused, or while another lookup probes it.
func (p *pause) admit(now time.Time) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if left := p.until.Sub(now); left > 0 {
		return &PausedError{Service: p.service, Left: left}
	}
	if !p.needsProbe {
		return nil
	}
	if now.Before(p.probeUntil) {
		return &PausedError{Service: p.service, Left: probeWait}
	}
	p.probeUntil = now.Add(p.probeTimeout)
	return nil
}

// answered notes the answer to an admitted lookup, status 0 when none
// came (a network error). A 429 or 503 pauses the service (its
// Retry-After or RateLimit-Reset, else defaultPause, at most maxPause)
// and returns the error for the lookup; any other answer reopens it.
func (p *pause) answered(status int, h http.Header, now time.Time) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probeUntil = time.Time{}
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		if status != 0 {
			p.needsProbe = false
		}
		return nil
	}
	wait := retryafter.Parse(h, now, maxPause)
	if wait <= 0 {
		wait = defaultPause
	}
	if until := now.Add(wait); until.After(p.until) {
		p.until = until
	}
	p.needsProbe = true
	return &PausedError{Service: p.service, Status: status, Left: p.until.Sub(now)}
}
