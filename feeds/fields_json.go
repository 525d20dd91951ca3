package feeds

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/atfeeds/appview/internal/jsontext"
)

// Extraction reads a record's JSON bytes in place: it finds the members
// along a field's path and decodes only the values at its end, so the rest
// of the record (text, facets, embeds) is stepped over, never decoded.
// Decoding a whole post into map[string]any cost about 60 allocations per
// record on the ingest path. Records arrive as valid JSON (the stream
// decoder and the PDS clients check it); on invalid bytes the scan stays
// in bounds and ends, and finds what it finds.

// extractFields returns each def's values in a record body, bounded by
// MaxFieldValues, MaxFieldVisits and MaxFieldValueBytes. Values of the
// wrong type yield nothing: a record without the field never matches a
// filter on it.
func extractFields(body []byte, defs []fieldDef) [][]any {
	out := make([][]any, len(defs))
	for i, d := range defs {
		var vals []any
		visits := 0
		walkJSON(body, d.path, func(raw []byte) bool {
			visits++
			if x, ok := jsonFieldValue(d.kind, raw); ok && !containsValue(vals, x) {
				vals = append(vals, x)
			}
			return len(vals) < MaxFieldValues && visits < MaxFieldVisits
		})
		out[i] = vals
	}
	return out
}

// walkJSON calls visit with every value at path under raw, arrays fanning
// out, until visit returns false. It reports whether to go on. Arrays of
// arrays are not fanned out again: one level per segment keeps a hostile
// nesting from costing more than the document's size.
func walkJSON(raw []byte, path []string, visit func([]byte) bool) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return true
	}
	switch {
	case raw[0] == '[':
		return eachElement(raw, func(e []byte) bool {
			if e[0] == '[' {
				return true
			}
			return walkJSON(e, path, visit)
		})
	case len(path) == 0:
		return visit(raw)
	case raw[0] == '{':
		if v := member(raw, path[0]); v != nil {
			return walkJSON(v, path[1:], visit)
		}
	}
	return true
}

// jsonFieldValue converts one raw JSON value to what record_fields stores
// for the kind, or reports that it does not fit.
func jsonFieldValue(kind FieldKind, raw []byte) (any, bool) {
	switch kind {
	case FieldEquality:
		var s string
		switch {
		case raw[0] == '"':
			var ok bool
			if s, ok = jsonString(raw); !ok {
				return nil, false
			}
		case string(raw) == "true" || string(raw) == "false":
			s = string(raw)
		default:
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil {
				return nil, false
			}
			s = strconv.FormatInt(n, 10)
		}
		if s == "" || len(s) > MaxFieldValueBytes || !utf8.ValidString(s) {
			return nil, false
		}
		return s, true
	case FieldDatetime:
		if raw[0] != '"' {
			return nil, false
		}
		s, ok := jsonString(raw)
		if !ok {
			return nil, false
		}
		us, ok := datetimeValue(s)
		return us, ok
	case FieldInteger:
		if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			return nil, false
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		return n, err == nil
	}
	return nil, false
}

// jsonString decodes a JSON string literal; the common case, without
// escapes, is its bytes.
func jsonString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[len(raw)-1] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), true
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}

// member returns the raw value of key in the JSON object obj (the last
// one, as encoding/json would), or nil.
func member(obj []byte, key string) []byte {
	var found []byte
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		kEnd := skipValue(obj, i)
		k := obj[i:kEnd]
		i = skipSpace(obj, kEnd)
		if i >= len(obj) || obj[i] != ':' {
			break
		}
		i = skipSpace(obj, i+1)
		if i >= len(obj) {
			break
		}
		vEnd := skipValue(obj, i)
		if keyIs(k, key) {
			found = obj[i:vEnd]
		}
		i = skipSpace(obj, vEnd)
		if i >= len(obj) || obj[i] != ',' {
			break
		}
		i = skipSpace(obj, i+1)
	}
	return found
}

// keyIs reports whether the JSON string literal raw spells key. An
// escaped key is legal JSON; it is compared in place, not decoded: key is
// letters, digits, '_' and '$' (CheckFieldPath), which only a \u escape
// spells, and any other escape makes a character key does not hold.
// Decoding each escaped key cost an allocation per key, field and level:
// a 60 KB record of keys spelt "\u0061" took about 6.6 ms to extract four
// fields from, some 1,500 posts' worth.
func keyIs(raw []byte, key string) bool {
	if len(raw) < 2 || raw[len(raw)-1] != '"' {
		return false
	}
	in := raw[1 : len(raw)-1]
	if len(in) == len(key) {
		return string(in) == key // an escape would make it shorter
	}
	k := 0
	for i := 0; i < len(in); k++ {
		if k == len(key) {
			return false
		}
		if in[i] != '\\' {
			if in[i] != key[k] {
				return false
			}
			i++
			continue
		}
		if r, ok := jsontext.EscapedUnit(in, i); !ok || r != rune(key[k]) {
			return false
		}
		i += 6
	}
	return k == len(key)
}

// eachElement calls fn with each element of the JSON array arr until fn
// returns false, and reports whether it went through: false when fn
// stopped it, so a walk through nested arrays stops at every level (it
// reported true, and the outer array went on past the values cap: a post
// with 16 tags in its first facet and one in each of 99 more stored 115).
func eachElement(arr []byte, fn func([]byte) bool) bool {
	i := skipSpace(arr, 1)
	for i < len(arr) && arr[i] != ']' {
		end := skipValue(arr, i)
		if end == i || !fn(arr[i:end]) {
			return false
		}
		i = skipSpace(arr, end)
		if i >= len(arr) || arr[i] != ',' {
			break
		}
		i = skipSpace(arr, i+1)
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at b[i],
// without recursion: nesting is counted, strings are stepped over.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return min(i+1, len(b))
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing container
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		default:
			if depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ':') {
				return i
			}
		}
	}
	return len(b)
}

func containsValue(vals []any, x any) bool {
	for _, v := range vals {
		if v == x {
			return true
		}
	}
	return false
}
