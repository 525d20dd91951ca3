package pds

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/atfeeds/appview/internal/retryafter"
	"github.com/atfeeds/appview/internal/textclip"
)

// Kind classifies a failed PDS request by what the caller should do next.
type Kind int

const (
	// KindRepoGone: the repo does not exist here or is deactivated, taken
	// down or suspended. Record it; do not retry in a loop.
	KindRepoGone Kind = iota + 1
	// KindNotFound: RecordNotFound, or a 404 NotFound.
	KindNotFound
	// KindRateLimited: 429; RetryAfter says when to come back if the PDS
	// said so.
	KindRateLimited
	// KindUpstream: 5xx, a 404 that names no missing record, or the PDS
	// could not be reached (refused, reset, DNS failure).
	KindUpstream
	// KindTimeout: the request or the body took longer than the timeout.
	KindTimeout
	// KindBadResponse: the answer is unusable: bad or truncated JSON, wrong
	// content type, too large, an oversized cursor.
	KindBadResponse
	// KindBadCursor: 400 InvalidRequest to a request that carried a cursor.
	KindBadCursor
	// KindForbidden: the endpoint may not be called: not an http(s) URL, or
	// it resolves to a private, loopback or link-local address.
	KindForbidden
	// KindRejected: any other 4xx (auth required, invalid request).
	KindRejected
)

var kindNames = map[Kind]string{
	KindRepoGone:    "repo_gone",
	KindNotFound:    "not_found",
	KindRateLimited: "rate_limited",
	KindUpstream:    "upstream",
	KindTimeout:     "timeout",
	KindBadResponse: "bad_response",
	KindBadCursor:   "bad_cursor",
	KindForbidden:   "forbidden",
	KindRejected:    "rejected",
}

// String is a short snake_case name, usable as a metric label.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "kind_" + strconv.Itoa(int(k))
}

// Error is a classified PDS failure.
type Error struct {
	Kind Kind
	// Status is the HTTP status, 0 when no answer arrived.
	Status int
	// Name and Message come from the XRPC error envelope when there was one.
	Name    string
	Message string
	// RetryAfter is the wait the PDS asked for (KindRateLimited), or zero.
	RetryAfter time.Duration
	// Err is the underlying transport or decoding error, if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pds: %s", e.Kind)
	if e.Status != 0 {
		fmt.Fprintf(&b, " (status %d)", e.Status)
	}
	if e.Name != "" {
		fmt.Fprintf(&b, " %s", e.Name)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %s", shortError(e.Err))
	}
	return b.String()
}

// shortError is err's text cut short: a transport error names the URL it
// failed on, which after a redirect is the PDS's Location header, up to
// the 64 KiB header cap, and this text is logged (a failed first read,
// notifyOfUpdate's upstream failures). The error chain is kept whole for
// errors.Is and errors.As; only the text is cut
// (TestATransportErrorIsShort).
func shortError(err error) string {
	if ue, ok := err.(*url.Error); ok && ue.Err != nil {
		return truncate(fmt.Sprintf("%s %q: %s", ue.Op, truncate(ue.URL, 256), truncate(ue.Err.Error(), 256)), 640)
	}
	return truncate(err.Error(), 640)
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err, or 0 when err is not an *Error (such as
// the caller's own context ending).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// Retryable reports whether trying again soon may succeed: rate limits,
// 5xx and unreachable PDSes, timeouts.
func Retryable(err error) bool {
	switch KindOf(err) {
	case KindRateLimited, KindUpstream, KindTimeout:
		return true
	}
	return false
}

var repoGoneNames = map[string]bool{
	"RepoNotFound":    true,
	"RepoDeactivated": true,
	"RepoTakendown":   true,
	"RepoSuspended":   true,
}

// maxRetryAfter bounds what a PDS can ask us to wait.
const maxRetryAfter = 24 * time.Hour

// classify turns a non-200 answer into an *Error. body is the (capped)
// error body; an unparsable one just leaves Name and Message empty.
func classify(status int, header http.Header, body []byte, hadCursor bool, now time.Time) *Error {
	var env struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &env)
	e := &Error{Status: status, Name: truncate(env.Error, 64), Message: truncate(env.Message, 256)}
	clientError := status >= 400 && status < 500
	switch {
	// The status decides first where it says "later": a rate-limited or
	// failing answer whose body names a missing record or repo (a proxy's
	// page, a hostile PDS) must not delete a stored record or record the
	// repo gone; it is retried (found by FuzzClassify).
	case status == http.StatusTooManyRequests:
		e.Kind = KindRateLimited
		e.RetryAfter = retryAfter(header, now)
	case status >= 500:
		e.Kind = KindUpstream
	// Only a client error says a repo or record is missing: a redirect
	// Go does not follow (a 304, a 3xx with no Location) naming one is no
	// PDS's answer either (a review).
	case clientError && repoGoneNames[env.Error],
		// The reference PDS answers an unknown or deactivated repo with a
		// plain InvalidRequest "Could not find repo: <repo>".
		status == http.StatusBadRequest && env.Error == "InvalidRequest" && strings.HasPrefix(env.Message, "Could not find repo"):
		e.Kind = KindRepoGone
	case clientError && env.Error == "RecordNotFound" || (status == http.StatusNotFound && env.Error == "NotFound"):
		// A 404 is the record's absence only when the PDS says so in an
		// XRPC error that names it. A bare one (an HTML page, an empty
		// body) comes from a proxy or a PDS being deployed, and a 404
		// MethodNotImplemented from a host that is no PDS or lacks the
		// method: taken as "not found", either would delete a stored
		// record (notifyOfUpdate) or store "no profile" for good. They
		// are upstream failures, retried
		// (TestAMethodNotImplementedIsNotARecordNotFound).
		e.Kind = KindNotFound
	case status == http.StatusNotFound:
		e.Kind = KindUpstream
	case env.Error == "RateLimitExceeded":
		e.Kind = KindRateLimited
		e.RetryAfter = retryAfter(header, now)
	case status == http.StatusBadRequest && env.Error == "InvalidRequest" && hadCursor:
		e.Kind = KindBadCursor
	case status >= 400:
		e.Kind = KindRejected
	default:
		e.Kind = KindBadResponse
	}
	return e
}

// retryAfter is how long a 429 asked us to wait, bounded by maxRetryAfter.
func retryAfter(h http.Header, now time.Time) time.Duration {
	return retryafter.Parse(h, now, maxRetryAfter)
}

// truncate keeps hostile strings short, at a rune boundary.
var truncate = textclip.Clip
