package backfill

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/atfeeds/appview/internal/clientkey"
	"github.com/atfeeds/appview/internal/tokenbucket"
)

// First reads are the expensive thing an outsider can trigger: each one
// reaches out to PDSes. Admission bounds them with a token bucket per
// client for new viewers and a global cap on running and queued runs.
// Reads by viewers whose first read is done never pass through here.

// ErrRateLimited is returned when a client asks for too many new viewers;
// ErrOverloaded when too many first reads run or wait already.
var (
	ErrRateLimited = errors.New("too many new viewers from this client")
	ErrOverloaded  = errors.New("too many first reads in progress")
)

// RejectedError carries the wait a client should honour (Retry-After).
type RejectedError struct {
	Err        error
	RetryAfter time.Duration
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%v: retry after %s", e.Err, e.RetryAfter)
}

func (e *RejectedError) Unwrap() error { return e.Err }

// AdmissionConfig bounds first reads. Zero values take the defaults noted.
type AdmissionConfig struct {
	// PerClientRate new viewers per second per client, with PerClientBurst
	// (defaults 0.5/s, burst 10).
	PerClientRate  float64
	PerClientBurst int
	// MaxRunning first reads run at once (default 4); MaxQueued more may
	// wait for a running slot (default 64; negative: none may wait).
	MaxRunning, MaxQueued int
	// MaxClients bounds the per-client buckets kept (default 10,000); past
	// it the buckets idle long enough to be full again are forgotten, and
	// if that is not enough, all of them (forgetOldest).
	MaxClients int
	// OverloadedRetryAfter is the Retry-After of a refusal because the
	// queue is full (default 5s).
	OverloadedRetryAfter time.Duration
}

// DefaultMaxRunning is the default number of first reads running at once.
const DefaultMaxRunning = 4

func (c *AdmissionConfig) setDefaults() {
	if c.PerClientRate <= 0 {
		c.PerClientRate = 0.5
	}
	if c.PerClientBurst <= 0 {
		c.PerClientBurst = 10
	}
	if c.MaxRunning <= 0 {
		c.MaxRunning = DefaultMaxRunning
	}
	switch {
	case c.MaxQueued == 0:
		c.MaxQueued = 64
	case c.MaxQueued < 0:
		c.MaxQueued = 0
	}
	if c.MaxClients <= 0 {
		c.MaxClients = 10_000
	}
	if c.OverloadedRetryAfter <= 0 {
		c.OverloadedRetryAfter = 5 * time.Second
	}
}

type admission struct {
	cfg     AdmissionConfig
	running chan struct{} // semaphore of MaxRunning
	mu      sync.Mutex
	waiting int
	shape   tokenbucket.Shape
	buckets map[string]*tokenbucket.Bucket
}

func newAdmission(cfg AdmissionConfig) *admission {
	cfg.setDefaults()
	return &admission{
		cfg: cfg, running: make(chan struct{}, cfg.MaxRunning),
		shape:   tokenbucket.Shape{Burst: float64(cfg.PerClientBurst), PerSecond: cfg.PerClientRate},
		buckets: map[string]*tokenbucket.Bucket{},
	}
}

// allowClient takes a token from the client's bucket.
func (a *admission) allowClient(client string, now time.Time) error {
	client = clientkey.Of(client)
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.buckets[client]
	if b == nil {
		if len(a.buckets) >= a.cfg.MaxClients {
			a.forgetOldest(now)
		}
		full := tokenbucket.Full(a.shape, now)
		b = &full
		a.buckets[client] = b
	}
	b.Refill(a.shape, now)
	if !b.Has() {
		return &RejectedError{Err: ErrRateLimited, RetryAfter: max(b.Wait(a.shape), time.Second)}
	}
	b.Take()
	return nil
}

// forgetOldest drops buckets idle long enough to be full again, or failing
// that, every bucket: memory stays bounded whatever clients do.
func (a *admission) forgetOldest(now time.Time) {
	for k, b := range a.buckets {
		if b.Refill(a.shape, now); b.IsFull(a.shape) {
			delete(a.buckets, k)
		}
	}
	if len(a.buckets) >= a.cfg.MaxClients {
		clear(a.buckets)
	}
}

// queueSlot is a place among the first reads running or waiting, held by
// one goroutine at a time. A request reserves it before it writes
// anything, so a saturated daemon refuses a new viewer without touching
// the database; the run it starts takes it over.
type queueSlot struct {
	a *admission
}

// enqueue reserves a place, or refuses with ErrOverloaded when
// MaxRunning+MaxQueued are taken.
func (a *admission) enqueue() (*queueSlot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiting >= a.cfg.MaxRunning+a.cfg.MaxQueued {
		return nil, &RejectedError{Err: ErrOverloaded, RetryAfter: a.cfg.OverloadedRetryAfter}
	}
	a.waiting++
	return &queueSlot{a: a}, nil
}

// take hands the place to a new holder; releasing q is then a no-op.
func (q *queueSlot) take() *queueSlot {
	t := &queueSlot{a: q.a}
	q.a = nil
	return t
}

// release gives the place back, once; a nil slot is a no-op.
func (q *queueSlot) release() {
	if q == nil || q.a == nil {
		return
	}
	q.a.mu.Lock()
	q.a.waiting--
	q.a.mu.Unlock()
	q.a = nil
}
