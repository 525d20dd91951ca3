package xrpc

import (
	"encoding/base64"
	"math"
	"strings"
	"testing"

	"github.com/atfeeds/appview/feeds"
)

// tamper flips one bit of byte i of the decoded cursor and re-encodes it,
// so the result is well-formed base64 with a wrong payload or check.
func tamper(t *testing.T, cursor string, i int) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		t.Fatal(err)
	}
	raw[i] ^= 0x10
	return base64.RawURLEncoding.EncodeToString(raw)
}

func TestCursorRoundTrip(t *testing.T) {
	scope := cursorScope{Feed: "following", Actor: alice, Collection: posts}
	for _, key := range []feeds.PageKey{
		{SortUS: 1795975616991124, RecordID: 12},
		{SortUS: 0, RecordID: 0},
		{SortUS: 1, RecordID: math.MaxInt64},
		{SortUS: math.MaxInt64, RecordID: 1},
		{SortUS: -1, RecordID: math.MinInt64}, // whatever the store hands out comes back
	} {
		c := encodeCursor(scope, key)
		if len(c) > 64 || strings.ContainsAny(c, "+/=") {
			t.Errorf("cursor %q is not short and URL-safe", c)
		}
		got, err := decodeCursor(scope, c)
		if err != nil || got != key {
			t.Errorf("decode(encode(%v)) = %v, %v", key, got, err)
		}
	}
}

func TestCursorRejectsForeign(t *testing.T) {
	scope := cursorScope{Feed: "following", Actor: alice, Collection: posts}
	key := feeds.PageKey{SortUS: 1795975616991124, RecordID: 12}
	c := encodeCursor(scope, key)
	for _, other := range []cursorScope{
		{Feed: "mutuals", Actor: alice, Collection: posts},
		{Feed: "following", Actor: bob, Collection: posts},
		{Feed: "following", Actor: alice, Collection: reposts},
		// Fields may not bleed into each other.
		{Feed: "followingd", Actor: "id:plc:alice000000000000000000a", Collection: posts},
	} {
		if _, err := decodeCursor(other, c); err == nil {
			t.Errorf("cursor for %+v accepted for %+v", scope, other)
		}
	}
	for i := range cursorRawLen {
		if _, err := decodeCursor(scope, tamper(t, c, i)); err == nil {
			t.Errorf("cursor with byte %d flipped accepted", i)
		}
	}
	for _, bad := range []string{"", "A", c + "A", c[1:], c + "==", strings.Repeat("A", maxCursorLen+1), strings.ToUpper(c)} {
		if bad == c {
			continue
		}
		if _, err := decodeCursor(scope, bad); err == nil {
			t.Errorf("cursor %q accepted", bad)
		}
	}
}

// FuzzDecodeCursor checks that decoding never panics, and that whatever it
// accepts is exactly what encodeCursor would have written.
func FuzzDecodeCursor(f *testing.F) {
	scope := cursorScope{Feed: "following", Actor: alice, Collection: posts}
	valid := encodeCursor(scope, feeds.PageKey{SortUS: 1795975616991124, RecordID: 12})
	for _, seed := range []string{
		valid, "", "AQ", valid + "=", valid[:len(valid)-1] + "B", strings.Repeat("_", 34),
		strings.Repeat("A", 2049), "\x00\xff", "+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, err := decodeCursor(scope, s)
		if err != nil {
			if err != errInvalidCursor {
				t.Fatalf("error %v, want errInvalidCursor", err)
			}
			return
		}
		if again := encodeCursor(scope, key); again != s {
			t.Fatalf("accepted %q, which re-encodes as %q", s, again)
		}
	})
}
