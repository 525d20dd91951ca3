package pds

import (
	"net/http"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzClassify feeds classify the error answers a hostile PDS may give: any
// status, body and Retry-After. Every answer must get a known kind, short
// name and message texts, and a wait within maxRetryAfter that only a rate
// limit carries; the status decides before the body (a 429 is rate
// limited, a 5xx upstream, and only a 4xx says a record or repo is
// missing).
func FuzzClassify(f *testing.F) {
	for _, s := range []struct {
		status     int
		body, wait string
		cursor     bool
	}{
		{400, `{"error":"InvalidRequest","message":"Could not find repo: did:plc:x"}`, "", false},
		{400, `{"error":"InvalidRequest","message":"bad cursor"}`, "", true},
		{404, `{"error":"RecordNotFound"}`, "", false},
		{404, `<html>not here</html>`, "", false},
		{429, `{"error":"RateLimitExceeded"}`, "120", false},
		{429, ``, "Wed, 21 Oct 2015 07:28:00 GMT", false},
		{503, `{"error":"` + string(make([]byte, 300)) + `"}`, "-5", false},
		{302, `{}`, "99999999999999999999", false},
		{304, `{"error":"RecordNotFound"}`, "", false},
		{502, `{"error":"RepoNotFound"}`, "", false},
	} {
		f.Add(s.status, []byte(s.body), s.wait, s.cursor)
	}
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, body []byte, wait string, hadCursor bool) {
		h := http.Header{}
		h.Set("Retry-After", wait)
		e := classify(status, h, body, hadCursor, now)
		if _, known := kindNames[e.Kind]; !known || e.Kind == KindForbidden || e.Kind == KindTimeout {
			t.Fatalf("an answer classified %v", e.Kind)
		}
		if e.Status != status {
			t.Fatalf("status %d recorded as %d", status, e.Status)
		}
		const clipped = len("…")
		if len(e.Name) > 64+clipped || len(e.Message) > 256+clipped {
			t.Fatalf("name of %d bytes, message of %d: not cut short", len(e.Name), len(e.Message))
		}
		if !utf8.ValidString(e.Name) || !utf8.ValidString(e.Message) {
			t.Fatalf("name %q or message %q is not UTF-8", e.Name, e.Message)
		}
		if e.RetryAfter < 0 || e.RetryAfter > maxRetryAfter || (e.RetryAfter != 0 && e.Kind != KindRateLimited) {
			t.Fatalf("%v answer asks to wait %v", e.Kind, e.RetryAfter)
		}
		if status == http.StatusTooManyRequests && e.Kind != KindRateLimited {
			t.Fatalf("a 429 classified %v", e.Kind)
		}
		if status >= 500 && e.Kind != KindUpstream {
			t.Fatalf("a %d classified %v", status, e.Kind)
		}
		// Only a client error may delete a stored record or mark a repo
		// gone: a failing, rate-limited or redirecting answer is retried.
		if (e.Kind == KindNotFound || e.Kind == KindRepoGone) && (status < 400 || status >= 500 || status == http.StatusTooManyRequests) {
			t.Fatalf("a %d (%s) classified %v", status, body, e.Kind)
		}
		if n := len(e.Error()); n > 512 {
			t.Fatalf("error text of %d bytes", n)
		}
	})
}
