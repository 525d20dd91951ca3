// Package retryafter reads how long an upstream that answered 429 (or 503)
// asked us to wait: its Retry-After, else the RateLimit-Reset that Bluesky
// PDSes send. The PDS client and the identity directory both pause on it,
// and read it the same way.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse reads Retry-After (seconds or an HTTP date), else RateLimit-Reset
// (unix seconds), and bounds the wait to [0, limit]: the value is the
// upstream's, and a huge one must not wrap or park us for good. It is zero
// when neither header can be read. A Retry-After that cannot be read does
// not hide a RateLimit-Reset that can (pds's
// TestAnUnreadableRetryAfterDoesNotHideRateLimitReset).
func Parse(h http.Header, now time.Time, limit time.Duration) time.Duration {
	d, ok := header(strings.TrimSpace(h.Get("Retry-After")), now, limit)
	if !ok {
		d = reset(strings.TrimSpace(h.Get("RateLimit-Reset")), now, limit)
	}
	return max(0, min(d, limit))
}

// header reads a Retry-After value; ok is false when there is none or it
// is neither seconds nor an HTTP date.
func header(v string, now time.Time, limit time.Duration) (d time.Duration, ok bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		// Clamped before the multiplication, which a large negative
		// value overflows into a huge wait (pds's
		// TestANegativeRetryAfterDoesNotWrapToTheCap).
		return time.Duration(max(0, min(secs, int64(limit/time.Second)))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.Sub(now), true
	}
	return 0, false
}

// reset reads a RateLimit-Reset value, unix seconds; zero when there is
// none or it cannot be read.
func reset(v string, now time.Time, limit time.Duration) time.Duration {
	epoch, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		return 0
	case epoch >= now.Add(limit).Unix():
		return limit
	}
	return time.Unix(epoch, 0).Sub(now)
}
