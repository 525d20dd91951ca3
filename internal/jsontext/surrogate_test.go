package jsontext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf16"
)

func TestLoneSurrogate(t *testing.T) {
	for _, tt := range []struct {
		json string
		lone bool
	}{
		{`{"text":"plain"}`, false},
		{`{"text":"\u0026 and \u003c"}`, false},
		{`{"text":"\ud83d\ude00"}`, false},            // a pair: 😀
		{`{"text":"\uD83D\uDE00 upper case"}`, false}, // hex digits either case
		{`{"text":"\ud83d"}`, true},                   // high, string ends
		{`{"text":"\ud83d x"}`, true},                 // high, then a character
		{`{"text":"\ud83d\u0041"}`, true},             // high, then a non-surrogate escape
		{`{"text":"\ud83d\ud83d\ude00"}`, true},       // high, then a pair
		{`{"text":"\ude00"}`, true},                   // low first
		{`{"text":"\ude00\ud83d"}`, true},             // a pair the wrong way round
		{`{"text":"\\ud83d"}`, false},                 // an escaped backslash, then text
		{`{"text":"\\\ud83d"}`, true},                 // an escaped backslash, then a lone escape
		{`{"\ud800":1}`, true},                        // keys are strings too
		{`{"a":["\ud83d\ude00","\udfff"]}`, true},
		{`{"text":"\"\ud83d\ude00\""}`, false},
	} {
		if got := LoneSurrogate([]byte(tt.json)); got != tt.lone {
			t.Errorf("LoneSurrogate(%s) = %t, want %t", tt.json, got, tt.lone)
		}
	}
}

// FuzzLoneSurrogate checks the scan against a decode of every string in
// the document by hand: LoneSurrogate must say true exactly when some
// string's escapes hold a surrogate that utf16 cannot pair.
func FuzzLoneSurrogate(f *testing.F) {
	for _, s := range []string{`{"a":"\ud83d\ude00"}`, `{"a":"\ud83d"}`, `["\\u0041","\udc00x"]`, `"\u00e9"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			LoneSurrogate([]byte(s)) // must not panic
			return
		}
		if got, want := LoneSurrogate([]byte(s)), loneByDecoding(t, s); got != want {
			t.Fatalf("LoneSurrogate(%q) = %t, want %t", s, got, want)
		}
	})
}

// loneByDecoding decodes every string literal of the valid JSON text s
// to UTF-16 units (a unit 0 standing for anything not a \u escape) and
// pairs their surrogates with utf16.
func loneByDecoding(t *testing.T, s string) bool {
	t.Helper()
	var lone bool
	in := false
	var units []uint16
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !in {
			if c == '"' {
				in, units = true, units[:0]
			}
			continue
		}
		switch c {
		case '"':
			in = false
			for j := 0; j < len(units); j++ {
				u := rune(units[j])
				if !utf16.IsSurrogate(u) {
					continue
				}
				if j+1 < len(units) && utf16.DecodeRune(u, rune(units[j+1])) != '\uFFFD' {
					j++
					continue
				}
				lone = true
			}
		case '\\':
			if s[i+1] == 'u' {
				var r uint16
				for _, h := range strings.ToLower(s[i+2 : i+6]) {
					d := strings.IndexRune("0123456789abcdef", h)
					r = r<<4 | uint16(d)
				}
				units = append(units, r)
				i += 5
			} else {
				units = append(units, 0)
				i++
			}
		default:
			units = append(units, 0) // any non-escaped character breaks a pair
		}
	}
	return lone
}

// BenchmarkLoneSurrogate measures the check on a typical post, as the
// Jetstream decoder and the PDS client run it on every record they store:
// one without an escape (a scan for `\u`) and one with HTML escapes and an
// emoji pair, as Go-encoded JSON carries them (a scan of every string).
//
//	go test ./internal/jsontext -run '^$' -bench LoneSurrogate -benchmem
func BenchmarkLoneSurrogate(b *testing.B) {
	plain := []byte(`{"$type":"app.bsky.feed.post","createdAt":"2026-12-01T22:13:54.123Z","langs":["en"],"text":"` +
		strings.Repeat("a post of ordinary length, ", 10) + `"}`)
	escaped := []byte(`{"$type":"app.bsky.feed.post","createdAt":"2026-12-01T22:13:54.123Z","langs":["en"],"text":"` +
		strings.Repeat(`a \u003cb\u003e \u0026 `, 10) + `\ud83d\ude00"}`)
	for _, c := range []struct {
		name string
		rec  []byte
	}{{"plain", plain}, {"escaped", escaped}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.rec)))
			for b.Loop() {
				if LoneSurrogate(c.rec) {
					b.Fatal("a valid record reported lone")
				}
			}
		})
	}
}
