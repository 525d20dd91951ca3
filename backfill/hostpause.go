package backfill

import (
	"errors"
	"maps"
	"net/url"
	"time"

	"github.com/atfeeds/appview/pds"
)

// A PDS that answers 429 is rate limiting us as a whole, not one account:
// every listing on that host waits until the time it asked for (its
// Retry-After, else defaultHostPause), and no request is sent to it
// meanwhile. A first read over 200 followees on one host would otherwise
// meet the limit 200 times.

// defaultHostPause is how long a host that answered 429 without a
// Retry-After is left alone.
const defaultHostPause = 30 * time.Second

// maxPausedHosts bounds the paused map; past it, expired entries go, and
// if that is not enough the map starts over (a host then gets one more
// request, and pauses again if it still limits).
const maxPausedHosts = 10_000

// hostKey is what the per-host request limit and the pause map count a
// PDS endpoint under: its host and port. A DID document may name one host
// under many paths (https://h/a, https://h/b); keyed by the whole
// endpoint, each path got slots and a pause of its own, so documents
// naming one host under many paths went round both
// (TestAHostsPathsShareItsPause). profiles and notify key by host too.
func hostKey(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		return u.Host
	}
	return endpoint
}

// errHostPaused is the cause of a listing failed without a request,
// because its host asked us to wait.
var errHostPaused = errors.New("host rate limited us: waiting")

// hostPaused returns the rate-limit error a request to host (a hostKey)
// meets without being sent, while the host is paused.
func (s *Service) hostPaused(host string, now time.Time) error {
	s.mu.Lock()
	until, ok := s.paused[host]
	s.mu.Unlock()
	if !ok || !now.Before(until) {
		return nil
	}
	return &pds.Error{Kind: pds.KindRateLimited, RetryAfter: until.Sub(now), Err: errHostPaused}
}

// notePause pauses host after err, when err is its 429.
func (s *Service) notePause(host string, err error, now time.Time) {
	var pe *pds.Error
	if !errors.As(err, &pe) || pe.Kind != pds.KindRateLimited || errors.Is(err, errHostPaused) {
		return
	}
	wait := pe.RetryAfter
	if wait <= 0 {
		wait = defaultHostPause
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.paused) >= maxPausedHosts {
		maps.DeleteFunc(s.paused, func(_ string, t time.Time) bool { return !now.Before(t) })
		if len(s.paused) >= maxPausedHosts {
			clear(s.paused)
		}
	}
	if until := now.Add(wait); until.After(s.paused[host]) {
		s.paused[host] = until
	}
}
