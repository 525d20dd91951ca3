package retryafter

import (
	"net/http"
	"testing"
	"time"
)

// FuzzParse: whatever an upstream writes in the two headers, the wait is
// within [0, limit], and never panics (large numbers, negative ones and
// dates far off included).
func FuzzParse(f *testing.F) {
	for _, seed := range [][2]string{
		{"7", ""}, {"-9223372036854775808", ""}, {"99999999999999", ""},
		{"Wed, 21 Oct 2015 07:28:00 GMT", ""}, {"soon", "1767269100"},
		{"", "9223372036854775807"}, {"", "-1"}, {" 120 ", " 1 "},
	} {
		f.Add(seed[0], seed[1], int64(time.Minute))
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, retryAfter, reset string, limit int64) {
		if limit <= 0 {
			return
		}
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("RateLimit-Reset", reset)
		if got := Parse(h, now, time.Duration(limit)); got < 0 || got > time.Duration(limit) {
			t.Fatalf("Retry-After %q, RateLimit-Reset %q, limit %v: wait %v", retryAfter, reset, time.Duration(limit), got)
		}
	})
}
