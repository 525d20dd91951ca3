package feeds

import (
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
	// MaxFieldVisits is how many values at a field's path extraction
	// examines in one record, whether they convert or not: an array of
	// thousands of repeated or unparsable values would otherwise cost a
	// conversion each (a datetime is three regular expressions).
	MaxFieldVisits = 4 * MaxFieldValues
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
