// Package pds reads public records from atproto PDSes over XRPC
// (com.atproto.repo.listRecords and getRecord).
//
// A PDS is a stranger: every request has a timeout and a body cap, record
// values are kept as raw JSON and checked one by one (an invalid record is
// skipped and counted, the page still counts), and every failure is an
// *Error whose Kind tells the caller whether to retry, back off, or record
// the repo as gone.
package pds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/egress"
)

// Options configures NewClient. Zero values take the defaults noted.
type Options struct {
	// MaxBodyBytes caps an answer (default 4 MiB).
	MaxBodyBytes int64
	// Timeout bounds one request, body included (default 10s).
	Timeout time.Duration
	// Now is the clock used to read Retry-After dates (default time.Now).
	Now func() time.Time
}

const (
	defaultMaxBodyBytes = 4 << 20
	defaultTimeout      = 10 * time.Second
	maxErrorBodyBytes   = 16 << 10
	// MaxLimit is the largest listRecords page a PDS serves.
	MaxLimit = 100
)

// Client reads records from PDSes. It is safe for concurrent use.
type Client struct {
	http    *http.Client
	maxBody int64
	timeout time.Duration
	now     func() time.Time
}

// NewClient returns a Client that sends requests through httpClient, which
// should be an egress client (nil means a default egress client).
func NewClient(httpClient *http.Client, opts Options) *Client {
	if httpClient == nil {
		httpClient = egress.NewClient(egress.Options{})
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = defaultMaxBodyBytes
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Client{http: sameHostRedirects(httpClient), maxBody: opts.MaxBodyBytes, timeout: opts.Timeout, now: opts.Now}
}

// sameHostRedirects returns a copy of client that follows a redirect only
// to the host (and port) it asked. The backfill counts its requests,
// slots and 429 pauses by the PDS host a DID document names; a redirect
// elsewhere went uncounted there, so many documents naming hosts that
// each redirect to one victim PDS sent it the whole backfill's
// concurrency instead of its per-host share, and its 429s paused the
// redirecting hosts, never it (a review found it; TestARedirectToAnotherHostIsRefused).
// XRPC needs no redirects; one within the host (a path, http to https
// where egress allows it) is still followed.
func sameHostRedirects(client *http.Client) *http.Client {
	c := *client
	next := client.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if first := via[0].URL; !strings.EqualFold(req.URL.Host, first.Host) {
			return fmt.Errorf("pds: refused redirect from %s to another host", first.Host)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 { // net/http's own policy, which a CheckRedirect replaces
			return errors.New("pds: stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// ListRecords reads one page of collection in repo, newest record key first.
// limit must be 1..MaxLimit; cursor is the previous page's Cursor, or empty.
func (c *Client) ListRecords(ctx context.Context, pdsURL string, repo syntax.DID, collection syntax.NSID, limit int, cursor string) (Page, error) {
	if limit < 1 || limit > MaxLimit {
		return Page{}, fmt.Errorf("pds: limit %d out of range 1..%d", limit, MaxLimit)
	}
	params := url.Values{
		"repo":       {repo.String()},
		"collection": {collection.String()},
		"limit":      {strconv.Itoa(limit)},
	}
	if cursor != "" {
		params.Set("cursor", cursor)
	}
	body, err := c.get(ctx, pdsURL, "com.atproto.repo.listRecords", params, cursor != "")
	if err != nil {
		return Page{}, err
	}
	page, err := decodePage(body, repo, collection, limit)
	if err != nil {
		return Page{}, &Error{Kind: KindBadResponse, Status: http.StatusOK, Err: err}
	}
	return page, nil
}

// GetRecord reads one record. A missing record is KindNotFound.
func (c *Client) GetRecord(ctx context.Context, pdsURL string, repo syntax.DID, collection syntax.NSID, rkey syntax.RecordKey) (Record, error) {
	params := url.Values{
		"repo":       {repo.String()},
		"collection": {collection.String()},
		"rkey":       {rkey.String()},
	}
	body, err := c.get(ctx, pdsURL, "com.atproto.repo.getRecord", params, false)
	if err != nil {
		return Record{}, err
	}
	var rr rawRecord
	if err := json.Unmarshal(body, &rr); err != nil {
		return Record{}, &Error{Kind: KindBadResponse, Status: http.StatusOK, Err: fmt.Errorf("decode getRecord: %w", err)}
	}
	rec, err := checkRecord(rr, repo, collection, rkey, false)
	if err != nil {
		return Record{}, &Error{Kind: KindBadResponse, Status: http.StatusOK, Err: fmt.Errorf("getRecord: %w", err)}
	}
	return rec, nil
}

// get performs one XRPC query and returns the body of a 200 answer.
func (c *Client) get(ctx context.Context, pdsURL, method string, params url.Values, hadCursor bool) ([]byte, error) {
	base, err := url.Parse(pdsURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, &Error{Kind: KindForbidden, Message: "PDS endpoint is not an http(s) URL"}
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := strings.TrimRight(base.String(), "/") + "/xrpc/" + method + "?" + params.Encode()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, &Error{Kind: KindForbidden, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, 0, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		body, err := egress.ReadBody(resp.Body, maxErrorBodyBytes)
		if err != nil && !errors.Is(err, egress.ErrTooLarge) && ctx.Err() != nil {
			return nil, fmt.Errorf("pds: %w", ctx.Err())
		}
		return nil, classify(resp.StatusCode, resp.Header, body, hadCursor, c.now())
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, &Error{Kind: KindBadResponse, Status: resp.StatusCode,
			Message: "content type " + strconv.Quote(truncate(resp.Header.Get("Content-Type"), 64))}
	}
	if resp.ContentLength > c.maxBody {
		return nil, &Error{Kind: KindBadResponse, Status: resp.StatusCode, Err: egress.ErrTooLarge,
			Message: fmt.Sprintf("declared %d bytes, cap %d", resp.ContentLength, c.maxBody)}
	}
	body, err := egress.ReadBody(resp.Body, c.maxBody)
	if err != nil {
		return nil, c.transportError(ctx, resp.StatusCode, err)
	}
	return body, nil
}

// transportError classifies a failure to get or read an answer. When the
// caller's own context ended, that is returned as is: not the PDS's fault.
func (c *Client) transportError(ctx context.Context, status int, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("pds: %w", ctx.Err())
	}
	e := &Error{Status: status, Err: err}
	var nerr net.Error
	switch {
	case errors.Is(err, egress.ErrForbiddenAddress):
		e.Kind = KindForbidden
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		e.Kind = KindTimeout
	case errors.Is(err, egress.ErrTooLarge):
		e.Kind = KindBadResponse
	case status != 0:
		// The answer started and broke off: truncated.
		e.Kind = KindBadResponse
	default:
		e.Kind = KindUpstream
	}
	return e
}
