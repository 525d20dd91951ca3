package pds

import (
	"errors"
	"maps"
	"net/url"
	"sync"
	"time"
)

// A PDS that answers 429 is rate limiting us as a whole, not one account:
// every request to that host waits until the time it asked for (its
// Retry-After or RateLimit-Reset, capped at maxRetryAfter; else
// DefaultHostPause), and none is sent to it meanwhile. A first read over
// 200 followees on one host would otherwise meet the limit 200 times, and
// notifyOfUpdate would ask again at every call.

// DefaultHostPause is how long a host that answered 429 without saying
// when to come back is left alone.
const DefaultHostPause = 30 * time.Second

// maxPausedHosts bounds the paused map; past it, expired entries go, and
// if that is not enough the map starts over (a host then gets one more
// request, and pauses again if it still limits).
const maxPausedHosts = 10_000

// ErrHostPaused is the cause of a request failed without being sent,
// because its host asked us to wait.
var ErrHostPaused = errors.New("host rate limited us: waiting")

// HostKey is what per-host request limits and pauses count a PDS endpoint
// under: its host and port. A DID document may name one host under many
// paths (https://h/a, https://h/b); keyed by the whole endpoint, each
// path got slots and a pause of its own, so documents naming one host
// under many paths went round both (backfill's TestAHostsPathsShareItsPause).
func HostKey(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		return u.Host
	}
	return endpoint
}

// HostPauses remembers the hosts (HostKeys) that answered 429, and until
// when. It is safe for concurrent use. A daemon's first-read backfill,
// notifyOfUpdate and profile fetcher share one: a 429 is about all our
// requests to the host, so once one of them meets it none of the others
// asks the host either. Each keeping its own, every one of them sent the
// paused host a request of its own and met the limit again
// (appview's TestAHostRateLimitingOneServiceIsPausedForAll). Each still
// keeps its own Limiter: request slots are per service, so one cannot
// starve another.
type HostPauses struct {
	mu     sync.Mutex
	paused map[string]time.Time
}

// NewHostPauses returns a HostPauses with no host paused.
func NewHostPauses() *HostPauses {
	return &HostPauses{paused: map[string]time.Time{}}
}

// Check returns the rate-limit error a request to host meets without
// being sent while the host is paused: a KindRateLimited *Error whose
// RetryAfter is the time left and whose cause is ErrHostPaused. It
// returns nil when the host may be asked.
func (p *HostPauses) Check(host string, now time.Time) error {
	p.mu.Lock()
	until, ok := p.paused[host]
	p.mu.Unlock()
	if !ok || !now.Before(until) {
		return nil
	}
	return &Error{Kind: KindRateLimited, RetryAfter: until.Sub(now), Err: ErrHostPaused}
}

// Note pauses host after err, when err is its 429 (not a Check's error).
func (p *HostPauses) Note(host string, err error, now time.Time) {
	var pe *Error
	if !errors.As(err, &pe) || pe.Kind != KindRateLimited || errors.Is(err, ErrHostPaused) {
		return
	}
	wait := pe.RetryAfter
	if wait <= 0 {
		wait = DefaultHostPause
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.paused) >= maxPausedHosts {
		maps.DeleteFunc(p.paused, func(_ string, t time.Time) bool { return !now.Before(t) })
		if len(p.paused) >= maxPausedHosts {
			clear(p.paused)
		}
	}
	if until := now.Add(wait); until.After(p.paused[host]) {
		p.paused[host] = until
	}
}
