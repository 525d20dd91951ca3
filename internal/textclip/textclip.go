// Package textclip cuts strings from outside (errors, upstream answers)
// short for messages and logs.
package textclip

import "unicode/utf8"

// Clip returns s cut to at most n bytes, at a rune boundary, marked with
// "…" when cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
