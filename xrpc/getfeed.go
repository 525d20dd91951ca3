package xrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/atfeeds/appview/backfill"
	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/internal/clientkey"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/labstack/echo/v4"
)

const (
	defaultLimit = 50
	maxLimit     = 100
)

// feedParams are getFeed's query parameters, parsed and checked.
type feedParams struct {
	Scope  cursorScope
	Limit  int
	Before *feeds.PageKey
	// Handle is set when the actor was given as a handle; Scope.Actor is
	// filled in once it resolves.
	Handle    syntax.Handle
	RawCursor string
	// Profiles asks for the authors' profiles (profiles=true).
	Profiles bool
	// Filters are the declared fields' parameters (filters.go); the
	// cursor is bound to them through Scope.Filter.
	Filters []feeds.Filter
}

// parseFeedParams checks getFeed's raw query string. An empty value counts
// as absent; any bad value is a 400, never a silent default.
func (s *Server) parseFeedParams(rawQuery string) (feedParams, *Error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return feedParams{}, invalidRequest("malformed query string")
	}
	// Unknown parameters are ignored, as XRPC servers do; known ones may
	// appear once.
	for _, name := range []string{"feed", "actor", "collection", "limit", "cursor", "profiles"} {
		if len(q[name]) > 1 {
			return feedParams{}, invalidRequest("parameter " + name + " must not be repeated")
		}
	}

	var p feedParams
	name := q.Get("feed")
	if name == "" {
		return feedParams{}, invalidRequest("feed is required")
	}
	spec, ok := s.feeds[name]
	if !ok {
		return feedParams{}, invalidRequest("unknown feed")
	}
	p.Scope.Feed = spec.Name

	// A copy: the value is a slice of the raw query string, and the actor
	// goes on into caches (remembered actor ids, the directory's answers)
	// that would keep the whole query alive
	// (TestGetFeedActorKeepsNoneOfTheQuery).
	actor := strings.Clone(q.Get("actor"))
	if actor == "" {
		return feedParams{}, invalidRequest("actor is required")
	}
	if did, err := syntax.ParseDID(actor); err == nil {
		p.Scope.Actor = did
	} else if h, err := syntax.ParseHandle(actor); err == nil {
		// Resolved in getFeed (a network call), after every cheap check.
		p.Handle = h.Normalize()
	} else {
		return feedParams{}, invalidRequest("actor must be a DID or a handle")
	}

	p.Scope.Collection = spec.Collections[0]
	if raw := q.Get("collection"); raw != "" {
		nsid, err := syntax.ParseNSID(raw)
		if err != nil {
			return feedParams{}, invalidRequest("collection must be an NSID")
		}
		found := false
		for _, c := range spec.Collections {
			// The authority of an NSID is case-insensitive.
			if c.Normalize() == nsid.Normalize() {
				p.Scope.Collection, found = c, true
				break
			}
		}
		if !found {
			return feedParams{}, invalidRequest("collection is not part of this feed")
		}
	}

	filters, canon, xe := parseFilters(q, spec, p.Scope.Collection)
	if xe != nil {
		return feedParams{}, xe
	}
	p.Filters, p.Scope.Filter = filters, canon

	p.Limit = defaultLimit
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxLimit {
			return feedParams{}, invalidRequest("limit must be an integer from 1 to 100")
		}
		p.Limit = n
	}

	switch q.Get("profiles") {
	case "", "false":
	case "true":
		p.Profiles = true
	default:
		return feedParams{}, invalidRequest("profiles must be true or false")
	}

	p.RawCursor = q.Get("cursor")
	if len(p.RawCursor) > maxCursorLen {
		return feedParams{}, invalidRequest(errInvalidCursor.Error())
	}
	if p.Handle == "" {
		if err := p.decodeCursor(); err != nil {
			return feedParams{}, err
		}
	} else if p.RawCursor != "" {
		// Its check waits for the DID; its shape need not.
		if _, err := parseCursor(p.RawCursor); err != nil {
			return feedParams{}, invalidRequest(errInvalidCursor.Error())
		}
	}
	return p, nil
}

// decodeCursor checks the cursor against the scope; it runs once the
// actor is known as a DID, since cursors are bound to it.
func (p *feedParams) decodeCursor() *Error {
	if p.RawCursor == "" {
		return nil
	}
	key, err := decodeCursor(p.Scope, p.RawCursor)
	if err != nil {
		return invalidRequest(errInvalidCursor.Error())
	}
	p.Before = &key
	return nil
}

// maxActorLookup bounds how long getFeed waits for a handle actor to
// resolve. The directory's own bound (30s by default, shared by every
// caller of one lookup) is longer than the server's write timeout, past
// which the client would get a dropped connection instead of an answer.
const maxActorLookup = 5 * time.Second

// actorLookupTimeout is getFeed's wait for a handle: at most
// maxActorLookup and a third of the write timeout, which runs from the end
// of the request headers and must still cover the first read's wait, the
// page read and writing the response.
func actorLookupTimeout(write time.Duration) time.Duration {
	return min(maxActorLookup, write/3)
}

// firstReadDeadline is how long after its start a getFeed stops waiting
// for a viewer's first read and serves what the feed holds: three
// quarters of the write timeout, which runs from the end of the request
// headers, so the page read, the profiles' wait (at most 2 s) and writing
// the response still fit. backfill.first_read_wait has no bound of its
// own, and a handle lookup comes before it; past the write timeout the
// client would get a dropped connection instead of the page.
func firstReadDeadline(write time.Duration) time.Duration {
	return write * 3 / 4
}

// pageDeadline is how long after its start a getFeed stops waiting for
// its page and profiles: nine tenths of the write timeout, which runs
// from the end of the request headers, so the response is still written
// in time.
func pageDeadline(write time.Duration) time.Duration {
	return write * 9 / 10
}

// resolveActor turns a handle actor into its DID, waiting at most
// s.actorTimeout; actorError says what a failure means to the client.
func (s *Server) resolveActor(c echo.Context, p *feedParams) *Error {
	if p.Handle == "" {
		return nil
	}
	if s.actors == nil {
		return invalidRequest("actor must be a DID: this server does not resolve handles")
	}
	// directory.Directory goes on with a lookup the request stopped
	// waiting for and caches its answer, so a retry after a 504 can hit.
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.actorTimeout)
	defer cancel()
	did, err := s.resolveHandleShared(ctx, clientkey.Of(c.RealIP()), p.Handle)
	var refused *shareError
	if errors.As(err, &refused) {
		s.logger.Debug("resolve actor", "err", err)
		c.Response().Header().Set("Retry-After", retryAfterSeconds(refused.wait))
		name := "RateLimitExceeded"
		if refused.status == http.StatusServiceUnavailable {
			name = "NotEnoughResources"
		}
		return &Error{Status: refused.status, Name: name, Message: refused.msg + "; retry later"}
	}
	if err != nil {
		xe := actorError(p.Handle, err)
		if xe.Status == http.StatusServiceUnavailable {
			c.Response().Header().Set("Retry-After", retryAfterSeconds(directory.RetryAfter(err)))
			s.logger.Debug("resolve actor", "err", err)
			return xe
		}
		if xe.Status >= http.StatusInternalServerError {
			s.logger.Warn("resolve actor", "status", xe.Status, "err", err)
		} else {
			s.logger.Debug("resolve actor", "err", err)
		}
		return xe
	}
	p.Scope.Actor = did
	return p.decodeCursor()
}

// actorError maps a failed handle resolution. Only an answer about the
// handle itself (it does not exist, its DID document does not claim it
// back, is malformed or names a forbidden PDS) is ActorNotFound, a 400. A
// directory that could not answer (DNS or HTTP failure, 5xx) says nothing
// about the actor: 502 UpstreamFailure, so clients retry rather than
// conclude a valid handle is gone; one that did not ask (directory.ErrBusy)
// is 503 NotEnoughResources; one that did not answer in time is 504
// UpstreamTimeout. So is a request cancelled by its client, who reads no
// answer: the lookup did not finish within the request, and it is not our
// fault (500).
func actorError(h syntax.Handle, err error) *Error {
	switch {
	case errors.Is(err, directory.ErrNotFound), errors.Is(err, directory.ErrHandleMismatch),
		errors.Is(err, directory.ErrInvalidDocument), errors.Is(err, directory.ErrForbiddenPDS):
		return &Error{Status: http.StatusBadRequest, Name: "ActorNotFound", Message: "could not resolve actor " + string(h)}
	case errors.Is(err, directory.ErrBusy):
		// The directory did not ask: its service paused us after a 429
		// or 503, or too many lookups were in flight. A 503 with the
		// time to wait (set by resolveActor), not a failure upstream.
		return &Error{Status: http.StatusServiceUnavailable, Name: "NotEnoughResources", Message: "the identity directory is busy resolving actor " + string(h) + "; retry later"}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &Error{Status: http.StatusGatewayTimeout, Name: "UpstreamTimeout", Message: "timed out resolving actor " + string(h) + "; retry later"}
	default:
		return &Error{Status: http.StatusBadGateway, Name: "UpstreamFailure", Message: "could not reach the identity directory to resolve actor " + string(h) + "; retry later"}
	}
}

// retryAfterSeconds is a Retry-After header's value for wait: whole
// seconds, rounded up, at least one.
func retryAfterSeconds(wait time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(wait.Seconds()))))
}

// feedRecord is one record of a getFeed response; the field order is the
// wire order.
type feedRecord struct {
	URI        string          `json:"uri"`
	CID        string          `json:"cid"`
	DID        string          `json:"did"`
	Collection string          `json:"collection"`
	RKey       string          `json:"rkey"`
	TimeUS     int64           `json:"time_us"`
	Value      json.RawMessage `json:"value"`
}

type feedResponse struct {
	Records []feedRecord `json:"records"`
	Cursor  string       `json:"cursor,omitempty"`
	// Profiles is set only when asked for (profiles=true); a pointer so
	// that an empty list is still written.
	Profiles *[]profileView `json:"profiles,omitempty"`
}

// getFeed serves GET /xrpc/<ns>.getFeed.
func (s *Server) getFeed(c echo.Context) error {
	start := time.Now()
	p, xe := s.parseFeedParams(c.Request().URL.RawQuery)
	if xe != nil {
		return xe
	}
	if xe := s.resolveActor(c, &p); xe != nil {
		return xe
	}
	if s.viewers != nil {
		// The first read of a viewer backfills its feed, waiting a bounded
		// time, and no longer than the response can still be written;
		// later reads return at once.
		ctx, cancel := context.WithDeadline(c.Request().Context(), start.Add(s.firstReadBudget))
		err := s.viewers.Ensure(ctx, p.Scope.Actor, p.Scope.Feed, c.RealIP())
		outOfTime := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil {
			return s.firstReadError(c, err, outOfTime)
		}
	}
	// The page and its profiles must be ready while the response can
	// still be written: the write timeout cancels nothing, and a read
	// queued behind a saturated read pool would otherwise hold its
	// goroutine until the client gave up.
	ctx, cancel := context.WithDeadline(c.Request().Context(), start.Add(s.pageBudget))
	defer cancel()
	page, err := s.reader.ReadFeed(ctx, feeds.PageQuery{
		Feed:       p.Scope.Feed,
		Viewer:     p.Scope.Actor,
		Collection: p.Scope.Collection,
		Limit:      p.Limit,
		Before:     p.Before,
		Filters:    p.Filters,
		ScanLimit:  s.scanLimit,
	})
	if errors.Is(err, feeds.ErrUnknownField) {
		return invalidRequest("filter is not declared for this collection")
	}
	if err != nil {
		if xe := s.outOfTime(c, ctx, "read feed", err); xe != nil {
			return xe
		}
		return s.failed(c, "read feed", err, "feed", p.Scope.Feed, "collection", p.Scope.Collection)
	}

	resp := feedResponse{Records: make([]feedRecord, 0, len(page.Items))}
	for _, it := range page.Items {
		resp.Records = append(resp.Records, feedRecord{
			URI:        it.URI,
			CID:        it.CID,
			DID:        it.DID,
			Collection: it.Collection,
			RKey:       it.RKey,
			TimeUS:     it.TimeUS,
			Value:      it.Value,
		})
	}
	if page.Next != nil {
		resp.Cursor = encodeCursor(p.Scope, *page.Next)
	}
	if p.Profiles {
		views, err := s.hydrate(ctx, resp.Records)
		if err != nil {
			if xe := s.outOfTime(c, ctx, "hydrate profiles", err); xe != nil {
				return xe
			}
			return s.failed(c, "hydrate profiles", err)
		}
		resp.Profiles = &views
	}
	buf := pageBuffers.Get().(*[]byte)
	defer putPageBuffer(buf)
	*buf, err = appendFeedResponse((*buf)[:0], &resp)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	// With its length known, a page over net/http's 2 KiB buffer goes out
	// whole, not chunked: one write fewer on the connection.
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(*buf)))
	return c.Blob(http.StatusOK, "application/json; charset=utf-8", *buf)
}

// outOfTime answers a page read or hydration that ctx, getFeed's
// deadline (pageDeadline), cut off while the client still waited: 503
// with Retry-After, as the server was too busy to answer in time. Nil
// for any other failure. Counted by the requests metric's status.
func (s *Server) outOfTime(c echo.Context, ctx context.Context, what string, err error) *Error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || c.Request().Context().Err() != nil {
		return nil
	}
	s.logger.Debug(what+": out of time", "err", err)
	return notEnoughResources(c, "1", "the server is too busy to read this feed in time")
}

// firstReadError answers a first read refused for load with 429 (this
// client asks for too many new viewers) or 503 (the daemon is saturated),
// both with Retry-After, and one refused because the daemon is stopping,
// or whose write found the write lock held by another process, or that
// failed once getFeed's wait for it ran out (outOfTime: its registration
// waited for the writer behind a long batch), with 503; anything else is
// our own failure.
func (s *Server) firstReadError(c echo.Context, err error, outOfTime bool) error {
	if errors.Is(err, backfill.ErrStopping) {
		return notEnoughResources(c, "5", "the server is stopping")
	}
	if errors.Is(err, feeds.ErrWriteBusy) {
		// The viewer's registration (or another write of its first read)
		// waited out the busy timeout behind another process's write
		// lock, an operator command's: nothing is broken, and the read
		// may be asked again, as notifyOfUpdate answers the same wait.
		s.logger.Warn("first read: the write lock is held by another process", "err", err)
		return notEnoughResources(c, "1", "the database is busy")
	}
	var rej *backfill.RejectedError
	if !errors.As(err, &rej) {
		if outOfTime && c.Request().Context().Err() == nil {
			s.logger.Warn("first read: not registered within the request's time", "err", err)
			return notEnoughResources(c, "1", "the database is busy")
		}
		return s.failed(c, "first read", err)
	}
	wait := strconv.Itoa(int(math.Ceil(rej.RetryAfter.Seconds())))
	if errors.Is(err, backfill.ErrRateLimited) {
		c.Response().Header().Set("Retry-After", wait)
		return &Error{Status: http.StatusTooManyRequests, Name: "RateLimitExceeded", Message: "too many new viewers from this client; retry later"}
	}
	return notEnoughResources(c, wait, "too many first reads in progress")
}
