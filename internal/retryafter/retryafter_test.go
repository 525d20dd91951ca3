package retryafter

import (
	"net/http"
	"testing"
	"time"
)

// The limit is the caller's: the directory's pauses are bounded tighter
// than a PDS's, and every reading of the headers must stay under it.
func TestParseStaysUnderTheCallersLimit(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const limit = time.Minute
	for _, tc := range []struct {
		header, value string
		want          time.Duration
	}{
		{"Retry-After", "7", 7 * time.Second},
		{"Retry-After", "3600", limit},
		{"Retry-After", now.Add(time.Hour).Format(http.TimeFormat), limit},
		{"Retry-After", "-9223372036854775808", 0},
		{"RateLimit-Reset", "1767269100", limit}, // 12:05 UTC
		{"RateLimit-Reset", "1767268830", 30 * time.Second},
		{"RateLimit-Reset", "9223372036854775807", limit},
		{"X-Other", "5", 0},
	} {
		h := http.Header{}
		h.Set(tc.header, tc.value)
		if got := Parse(h, now, limit); got != tc.want {
			t.Errorf("%s: %s: got %v, want %v", tc.header, tc.value, got, tc.want)
		}
	}
}
