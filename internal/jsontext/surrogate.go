// Package jsontext checks JSON text for what encoding/json lets through
// but stricter parsers refuse.
package jsontext

import "bytes"

// LoneSurrogate reports whether a string in the JSON text v escapes a
// UTF-16 surrogate that is not half of a pair: a high surrogate (\ud800 to
// \udbff) not followed by an escaped low one, or a low one (\udc00 to
// \udfff) on its own. encoding/json reads such an escape as U+FFFD, but a
// record body is stored and served in getFeed byte for byte, and strict
// parsers (serde_json, for one) refuse the whole page over it. Valid
// atproto data cannot hold one: its strings are UTF-8, which has no
// surrogates. v should be valid JSON; on anything else the answer means
// nothing, but the scan stays within v.
func LoneSurrogate(v []byte) bool {
	if !bytes.Contains(v, []byte(`\u`)) {
		return false // most records: no escape to look at
	}
	inString := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			r, ok := EscapedUnit(v, i)
			switch {
			case !ok:
				i++ // a one-character escape
			case r < 0xd800 || r > 0xdfff:
				i += 5
			case r >= 0xdc00:
				return true // a low surrogate first
			default:
				low, ok := EscapedUnit(v, i+6)
				if !ok || low < 0xdc00 || low > 0xdfff {
					return true // a high surrogate not followed by a low one
				}
				i += 11
			}
		}
	}
	return false
}

// EscapedUnit reads the \uXXXX escape at v[i:], if there is one: the
// UTF-16 code unit it spells.
func EscapedUnit(v []byte, i int) (rune, bool) {
	if i+6 > len(v) || v[i] != '\\' || v[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, h := range v[i+2 : i+6] {
		var d byte
		switch {
		case '0' <= h && h <= '9':
			d = h - '0'
		case 'a' <= h && h <= 'f':
			d = h - 'a' + 10
		case 'A' <= h && h <= 'F':
			d = h - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
