package directory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/egress"
)

// fetchDocument fetches and parses the DID document of did: did:plc from
// the PLC directory, did:web from https://host/.well-known/did.json.
func (d *Directory) fetchDocument(ctx context.Context, did syntax.DID) (document, error) {
	var docURL string
	switch did.Method() {
	case "plc":
		// Escaped: a DID may carry '%', and "did:plc:%2e%2e%2f…" sent as
		// is asked the PLC host for another path.
		docURL = d.plcURL + "/" + url.PathEscape(did.String())
	case "web":
		u, err := didWebURL(did)
		if err != nil {
			return document{}, err
		}
		docURL = u
	default:
		return document{}, fmt.Errorf("%w: DID method %q not supported", ErrNotFound, did.Method())
	}
	// Only the PLC directory is paused: a did:web host is a stranger's.
	var p *pause
	if did.Method() == "plc" {
		p = d.plcPause
	}
	body, err := d.get(ctx, docURL, maxDocumentBytes, p)
	if err != nil {
		return document{}, fmt.Errorf("resolve %s: %w", did, err)
	}
	return parseDocument(did, body, d.cfg.AllowPrivateNetworks)
}

// didWebURL maps did:web:host to its document URL. Only bare host names are
// atproto did:webs: no ports, no paths.
func didWebURL(did syntax.DID) (string, error) {
	host, err := syntax.ParseHandle(did.Identifier())
	if err != nil || !host.AllowedTLD() {
		return "", fmt.Errorf("%w: did:web host %q not allowed", ErrNotFound, truncate(did.Identifier()))
	}
	return "https://" + host.Normalize().String() + "/.well-known/did.json", nil
}

// resolveHandleXRPC asks the configured resolveHandle service.
func (d *Directory) resolveHandleXRPC(ctx context.Context, handle syntax.Handle) (syntax.DID, error) {
	u := strings.TrimRight(d.cfg.HandleResolverURL, "/") +
		"/xrpc/com.atproto.identity.resolveHandle?handle=" + url.QueryEscape(handle.String())
	body, err := d.get(ctx, u, maxHandleAnswerBytes, d.resolverPause)
	if err != nil {
		return "", fmt.Errorf("resolve handle %s: %w", handle, err)
	}
	var out struct {
		DID string `json:"did"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return "", fmt.Errorf("resolve handle %s: %w: bad answer: %v", handle, ErrUnavailable, err)
	}
	did, err := syntax.ParseDID(out.DID)
	if err != nil {
		return "", fmt.Errorf("resolve handle %s: %w: bad DID in answer", handle, ErrUnavailable)
	}
	return did, nil
}

// resolveHandleNetwork resolves a handle the way atproto specifies: a DNS
// TXT record "did=<did>" at _atproto.<handle>, else the body of
// https://<handle>/.well-known/atproto-did. The handle is ErrNotFound only
// when both say so.
func (d *Directory) resolveHandleNetwork(ctx context.Context, handle syntax.Handle) (syntax.DID, error) {
	if !handle.AllowedTLD() {
		return "", fmt.Errorf("%w: handle %s has a reserved TLD", ErrNotFound, handle)
	}
	did, dnsErr := d.resolveHandleDNS(ctx, handle)
	if dnsErr == nil {
		return did, nil
	}
	did, httpErr := d.resolveHandleWellKnown(ctx, handle)
	if httpErr == nil {
		return did, nil
	}
	err := fmt.Errorf("resolve handle %s: dns: %v; https: %w", handle, dnsErr, httpErr)
	if errors.Is(dnsErr, ErrNotFound) && errors.Is(httpErr, ErrNotFound) {
		return "", err
	}
	return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
}

func (d *Directory) resolveHandleDNS(ctx context.Context, handle syntax.Handle) (syntax.DID, error) {
	// Rooted (the trailing dot): a relative name is also looked up under
	// the resolver's search domains, first when it has fewer dots than
	// ndots (5 on Kubernetes), so a TXT record there (a wildcard) would
	// answer for every handle, and each lookup cost several queries.
	records, err := d.lookupTXT(ctx, "_atproto."+handle.String()+".")
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return "", fmt.Errorf("%w: no TXT record", ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	for _, r := range records {
		if v, ok := strings.CutPrefix(r, "did="); ok {
			if did, err := syntax.ParseDID(v); err == nil {
				return did, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no did= TXT record", ErrNotFound)
}

func (d *Directory) resolveHandleWellKnown(ctx context.Context, handle syntax.Handle) (syntax.DID, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+handle.String()+"/.well-known/atproto-did", nil)
	if err != nil {
		return "", err
	}
	resp, err := d.client.Do(req)
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound, errors.Is(err, egress.ErrForbiddenAddress):
		return "", fmt.Errorf("%w: %v", ErrNotFound, err)
	case err != nil:
		return "", err
	}
	defer resp.Body.Close()
	body, err := egress.ReadBody(resp.Body, maxHandleAnswerBytes)
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return "", fmt.Errorf("%w: status %d", ErrNotFound, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("status %d", resp.StatusCode)
	case err != nil:
		return "", err
	}
	// Trimmed before the conversion, so the DID is a string of its own: a
	// slice of the whole answer, up to maxHandleAnswerBytes, would be kept
	// by the handle cache and by the callers' caches
	// (TestACachedHandleAnswerKeepsNoneOfTheBody).
	did, err := syntax.ParseDID(string(bytes.TrimSpace(body)))
	if err != nil {
		return "", fmt.Errorf("%w: body is not a DID", ErrNotFound)
	}
	return did, nil
}

// get fetches u and returns its body, capped at max bytes. A 404 or 410 (PLC
// answers 410 for a tombstoned DID) and an XRPC "not found" answer are
// ErrNotFound; a wrong content type or an oversized body is
// ErrInvalidDocument; anything else that fails is ErrUnavailable. p, when
// not nil, is the pause of the configured service u is on: while it runs
// nothing is sent (but one probe at its end), and a 429 or 503 starts it
// (both a *PausedError).
func (d *Directory) get(ctx context.Context, u string, max int64, p *pause) ([]byte, error) {
	t, err := p.admit(d.cfg.Now())
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		p.answered(t, 0, nil, d.cfg.Now())
		return nil, fmt.Errorf("%w: %v", ErrInvalidDocument, err)
	}
	req.Header.Set("Accept", "application/did+ld+json, application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		p.answered(t, 0, nil, d.cfg.Now())
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		p.answered(t, resp.StatusCode, resp.Header, d.cfg.Now())
	} else {
		// Drain a little so the connection can be reused, no more.
		errBody, _ := egress.ReadBody(io.LimitReader(resp.Body, 4<<10), 4<<10)
		if err := p.answered(t, resp.StatusCode, resp.Header, d.cfg.Now()); err != nil {
			return nil, err
		}
		if notFound(resp.StatusCode, errBody) {
			return nil, fmt.Errorf("%w: status %d", ErrNotFound, resp.StatusCode)
		}
		return nil, fmt.Errorf("%w: status %d", ErrUnavailable, resp.StatusCode)
	}
	if !isJSON(resp.Header.Get("Content-Type")) {
		return nil, fmt.Errorf("%w: content type %q", ErrInvalidDocument, truncate(resp.Header.Get("Content-Type")))
	}
	if resp.ContentLength > max {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalidDocument, resp.ContentLength)
	}
	body, err := egress.ReadBody(resp.Body, max)
	if errors.Is(err, egress.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %v", ErrInvalidDocument, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read body: %v", ErrUnavailable, err)
	}
	return body, nil
}

func notFound(status int, body []byte) bool {
	if status == http.StatusNotFound || status == http.StatusGone {
		return true
	}
	if status != http.StatusBadRequest {
		return false
	}
	// resolveHandle answers 400: HandleNotFound, or InvalidRequest "Unable
	// to resolve handle" from older services.
	var env struct {
		Error string `json:"error"`
	}
	return json.Unmarshal(body, &env) == nil &&
		(env.Error == "HandleNotFound" || env.Error == "InvalidRequest")
}

// isJSON accepts a missing type, application/json and any application/*+json
// (PLC serves application/did+ld+json).
func isJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}
