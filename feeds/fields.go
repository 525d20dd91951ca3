package feeds

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// FieldKind says how a queryable field's values are stored and compared.
type FieldKind string

const (
	// FieldEquality values are text (strings, integers and booleans in
	// their JSON spelling), matched exactly.
	FieldEquality FieldKind = "equality"
	// FieldDatetime values are atproto datetimes, stored as unix
	// microseconds and matched by an inclusive range, so "…00Z" and
	// "…00.000+00:00" are the same instant.
	FieldDatetime FieldKind = "datetime"
	// FieldInteger values are JSON integers, matched by an inclusive range.
	FieldInteger FieldKind = "integer"
)

// Range reports whether the kind is matched by a range rather than a value.
func (k FieldKind) Range() bool { return k == FieldDatetime || k == FieldInteger }

// Field is a queryable field a target declares: getFeed accepts Name as a
// filter on the target's collection, matched against the values found at
// Path in each record.
type Field struct {
	Name string
	// Path is a dotted JSON path such as "langs" or "reply.root.uri". An
	// array anywhere along it yields each of its elements.
	Path string
	Kind FieldKind
}

// Params lists the request parameters of the field: its name for an
// equality field, name+"Min" and name+"Max" (inclusive bounds) for a
// range field.
func (f Field) Params() []string {
	if f.Kind.Range() {
		return []string{f.Name + "Min", f.Name + "Max"}
	}
	return []string{f.Name}
}

// Bounds of extraction: hostile records cannot make one record write more
// than maxFieldValues rows per field, or store long values.
const (
	// MaxFieldValues is how many values of one field a record contributes;
	// the rest of a longer array is not indexed.
	MaxFieldValues = 16
	// MaxFieldValueBytes is the longest equality value stored or matched;
	// a longer value is skipped, never truncated (a prefix would match
	// records that do not hold the value).
	MaxFieldValueBytes = 256
	// MaxFieldPathSegments bounds a path's depth.
	MaxFieldPathSegments = 8
)

// ErrBadFieldValue is returned by ParseFieldValue for a filter value that
// does not fit the field's kind.
var ErrBadFieldValue = errors.New("bad field value")

// ParseFieldValue parses a filter value given in a request: text for an
// equality field, an atproto datetime or an integer for a range field. It
// returns what record_fields holds for a matching record.
func ParseFieldValue(kind FieldKind, raw string) (any, error) {
	switch kind {
	case FieldEquality:
		if raw == "" || len(raw) > MaxFieldValueBytes || !utf8.ValidString(raw) {
			return nil, fmt.Errorf("%w: want 1 to %d bytes of UTF-8", ErrBadFieldValue, MaxFieldValueBytes)
		}
		return raw, nil
	case FieldDatetime:
		if us, ok := datetimeValue(raw); ok {
			return us, nil
		}
		return nil, fmt.Errorf("%w: want a datetime such as 2024-01-02T15:04:05Z", ErrBadFieldValue)
	case FieldInteger:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: want an integer", ErrBadFieldValue)
		}
		return n, nil
	}
	return nil, fmt.Errorf("%w: unknown kind %q", ErrBadFieldValue, kind)
}

// datetimeValue parses a datetime the way the stream decoder parses
// createdAt (leniently: records in the wild carry legacy formats), so a
// record and a filter agree on the instant.
func datetimeValue(raw string) (int64, bool) {
	if raw == "" || len(raw) > 64 {
		return 0, false
	}
	dt, err := syntax.ParseDatetimeLenient(raw)
	if err != nil {
		return 0, false
	}
	return dt.Time().UnixMicro(), true
}

// fieldDef is one extraction kept in record_field_defs.
type fieldDef struct {
	id           int64
	collectionID int64
	path         []string
	kind         FieldKind
}

// splitFieldPath splits a dotted path; CheckFieldPath has vetted it.
func splitFieldPath(p string) []string { return strings.Split(p, ".") }

// CheckFieldPath accepts a dotted path of 1 to MaxFieldPathSegments
// segments, each a JSON key of letters, digits, '_' or '$' (as in $type)
// not starting with a digit.
func CheckFieldPath(p string) error {
	segs := splitFieldPath(p)
	if len(segs) > MaxFieldPathSegments {
		return fmt.Errorf("path %q: at most %d segments", p, MaxFieldPathSegments)
	}
	for _, s := range segs {
		if s == "" || len(s) > 64 || (s[0] >= '0' && s[0] <= '9') {
			return fmt.Errorf("path %q: segments are 1 to 64 letters, digits, '_' or '$', not starting with a digit", p)
		}
		for _, c := range []byte(s) {
			ok := c == '_' || c == '$' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
			if !ok {
				return fmt.Errorf("path %q: segments are 1 to 64 letters, digits, '_' or '$', not starting with a digit", p)
			}
		}
	}
	return nil
}

// extractFields returns each def's values in a record body, bounded by
// MaxFieldValues and MaxFieldValueBytes. A body that is not a JSON object,
// and values of the wrong type, yield nothing: a record without the field
// never matches a filter on it.
func extractFields(body []byte, defs []fieldDef) [][]any {
	out := make([][]any, len(defs))
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return out
	}
	for i, d := range defs {
		var vals []any
		walkPath(doc, d.path, func(v any) bool {
			if x, ok := fieldValue(d.kind, v); ok && !containsValue(vals, x) {
				vals = append(vals, x)
			}
			return len(vals) < MaxFieldValues
		})
		out[i] = vals
	}
	return out
}

// walkPath calls visit with every value at path under v, arrays fanning
// out, until visit returns false. It reports whether to go on.
func walkPath(v any, path []string, visit func(any) bool) bool {
	if arr, ok := v.([]any); ok {
		for _, e := range arr {
			// Arrays of arrays are not fanned out again: one level per
			// segment keeps a hostile nesting from costing more than the
			// document's size.
			if _, nested := e.([]any); nested {
				continue
			}
			if !walkPath(e, path, visit) {
				return false
			}
		}
		return true
	}
	if len(path) == 0 {
		return visit(v)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return true
	}
	next, ok := obj[path[0]]
	if !ok {
		return true
	}
	return walkPath(next, path[1:], visit)
}

// fieldValue converts one JSON value to what record_fields stores for the
// kind, or reports that it does not fit.
func fieldValue(kind FieldKind, v any) (any, bool) {
	switch kind {
	case FieldEquality:
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case bool:
			s = strconv.FormatBool(x)
		case json.Number:
			n, err := x.Int64()
			if err != nil {
				return nil, false
			}
			s = strconv.FormatInt(n, 10)
		default:
			return nil, false
		}
		if s == "" || len(s) > MaxFieldValueBytes || !utf8.ValidString(s) {
			return nil, false
		}
		return s, true
	case FieldDatetime:
		s, ok := v.(string)
		if !ok {
			return nil, false
		}
		us, ok := datetimeValue(s)
		return us, ok
	case FieldInteger:
		x, ok := v.(json.Number)
		if !ok {
			return nil, false
		}
		n, err := x.Int64()
		return n, err == nil
	}
	return nil, false
}

func containsValue(vals []any, x any) bool {
	for _, v := range vals {
		if v == x {
			return true
		}
	}
	return false
}
