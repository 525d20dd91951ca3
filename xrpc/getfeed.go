package xrpc

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/atfeeds/appview/feeds"
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
	for _, name := range []string{"feed", "actor", "collection", "limit", "cursor"} {
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

	actor := q.Get("actor")
	if actor == "" {
		return feedParams{}, invalidRequest("actor is required")
	}
	did, err := syntax.ParseDID(actor)
	if err != nil {
		if _, herr := syntax.ParseHandle(actor); herr == nil {
			return feedParams{}, invalidRequest("actor must be a DID: handles are not supported yet")
		}
		return feedParams{}, invalidRequest("actor must be a DID")
	}
	p.Scope.Actor = did

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

	p.Limit = defaultLimit
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxLimit {
			return feedParams{}, invalidRequest("limit must be an integer from 1 to 100")
		}
		p.Limit = n
	}

	if raw := q.Get("cursor"); raw != "" {
		key, err := decodeCursor(p.Scope, raw)
		if err != nil {
			return feedParams{}, invalidRequest(errInvalidCursor.Error())
		}
		p.Before = &key
	}
	return p, nil
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
}

// getFeed serves GET /xrpc/<ns>.getFeed.
func (s *Server) getFeed(c echo.Context) error {
	p, xe := s.parseFeedParams(c.Request().URL.RawQuery)
	if xe != nil {
		return xe
	}
	page, err := s.reader.ReadFeed(c.Request().Context(), feeds.PageQuery{
		Feed:       p.Scope.Feed,
		Viewer:     p.Scope.Actor,
		Collection: p.Scope.Collection,
		Limit:      p.Limit,
		Before:     p.Before,
	})
	if err != nil {
		s.logger.Error("read feed", "feed", p.Scope.Feed, "collection", p.Scope.Collection, "err", err)
		return errInternal
	}

	resp := feedResponse{Records: make([]feedRecord, 0, len(page.Items))}
	for _, it := range page.Items {
		if !json.Valid(it.Value) {
			// Stored records were valid JSON when they came in; one that is
			// not must not take the whole page down with it.
			s.logger.Warn("skip record with invalid JSON", "uri", it.URI)
			continue
		}
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
	return writeJSON(c, http.StatusOK, resp)
}
