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
	// maxPause bounds what a service can ask: after it, one lookup asks
	// again and pauses anew if the service still limits.
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
type pause struct {
	service string
	mu      sync.Mutex
	until   time.Time
}

// check fails a lookup about to be sent while the service is paused.
func (p *pause) check(now time.Time) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	until := p.until
	p.mu.Unlock()
	if left := until.Sub(now); left > 0 {
		return &PausedError{Service: p.service, Left: left}
	}
	return nil
}

// note pauses the service after an answer of status with header h, and
// returns the error for that answer; nil when the answer asks no pause.
func (p *pause) note(status int, h http.Header, now time.Time) error {
	if p == nil || (status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable) {
		return nil
	}
	wait := retryafter.Parse(h, now, maxPause)
	if wait <= 0 {
		wait = defaultPause
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := now.Add(wait); until.After(p.until) {
		p.until = until
	}
	return &PausedError{Service: p.service, Status: status, Left: p.until.Sub(now)}
}
