package pds

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/atfeeds/appview/egress"
)

// A 429 whose Retry-After cannot be read (neither seconds nor an HTTP
// date) but whose RateLimit-Reset can is paused until that reset: the
// unreadable header hid the readable one, and the pause fell to zero
// (the caller's default), however far off the PDS's reset was.
func TestAnUnreadableRetryAfterDoesNotHideRateLimitReset(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "soon")
		w.Header().Set("RateLimit-Reset", strconv.FormatInt(now.Add(5*time.Minute).Unix(), 10))
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"error":"RateLimitExceeded","message":"Rate Limit Exceeded"}`))
	}))
	t.Cleanup(srv.Close)
	c := NewClient(egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: 5 * time.Second}),
		Options{Timeout: 5 * time.Second, Now: func() time.Time { return now }})

	_, err := c.ListRecords(t.Context(), srv.URL, alice, posts, 10, "")
	e, ok := err.(*Error)
	if !ok || e.Kind != KindRateLimited {
		t.Fatalf("got %v, want a rate limit", err)
	}
	if e.RetryAfter != 5*time.Minute {
		t.Errorf("RetryAfter = %v, want 5m0s from RateLimit-Reset", e.RetryAfter)
	}
}
