package xrpc

import (
	"encoding/binary"
	"math"
	"net/url"
	"slices"
	"strconv"

	"github.com/atfeeds/appview/feeds"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// parseFilters reads the filter parameters of the collection's declared
// fields: name=value for an equality field, nameMin= and nameMax=
// (inclusive) for a range field. It also returns the filters' canonical
// encoding, which the cursor is bound to, so a cursor taken under one
// filter is refused under another.
//
// Unknown parameters are ignored, as elsewhere; but a parameter that is a
// filter of another collection of the feed is refused, because ignoring it
// would answer an unfiltered page to a client that asked for a filter.
func parseFilters(q url.Values, spec FeedSpec, coll syntax.NSID) ([]feeds.Filter, string, *Error) {
	var filters []feeds.Filter
	var canon []byte
	mine := map[string]bool{}
	for _, f := range spec.Fields[coll] {
		params := f.Params()
		raws := make([]string, len(params))
		for i, p := range params {
			mine[p] = true
			if len(q[p]) > 1 {
				return nil, "", invalidRequest("parameter " + p + " must not be repeated")
			}
			raws[i] = q.Get(p)
		}
		filter := feeds.Filter{Field: f.Name, Min: math.MinInt64, Max: math.MaxInt64}
		set := false
		for i, raw := range raws {
			if raw == "" {
				continue // empty counts as absent
			}
			v, err := feeds.ParseFieldValue(f.Kind, raw)
			if err != nil {
				return nil, "", invalidRequest("invalid " + params[i] + ": " + err.Error())
			}
			set = true
			switch {
			case !f.Kind.Range():
				filter.Equals = v.(string)
			case i == 0:
				filter.Min = v.(int64)
			default:
				filter.Max = v.(int64)
			}
		}
		if !set {
			continue
		}
		if filter.Min > filter.Max {
			return nil, "", invalidRequest(params[0] + " must not exceed " + params[1])
		}
		filters = append(filters, filter)
		canon = appendField(canon, f.Name)
		if f.Kind.Range() {
			canon = appendField(canon, strconv.FormatInt(filter.Min, 10)+".."+strconv.FormatInt(filter.Max, 10))
		} else {
			canon = appendField(canon, filter.Equals)
		}
	}
	for _, c := range spec.Collections {
		if c == coll {
			continue
		}
		for _, f := range spec.Fields[c] {
			for _, p := range f.Params() {
				// Any value, not only the first: "langs=&langs=en" asks too.
				if !mine[p] && slices.ContainsFunc(q[p], func(v string) bool { return v != "" }) {
					return nil, "", invalidRequest("parameter " + p + " is not a filter of collection " + string(coll))
				}
			}
		}
	}
	return filters, string(canon), nil
}

// appendField length-prefixes s, so no two filter sets encode alike.
func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
