package jetstream

import (
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

var identSeeds = []string{
	"", ".", "..", "...", "self", "3kbbpidw2r7zx", "a:b~c_d.e-f", "a b", "a/b", "é",
	strings.Repeat("a", 512), strings.Repeat("a", 513), strings.Repeat("a", 7),
	testCID, "Qmbxyzxyzxyz", "QmXyzxyzxyz", "bafy+abc=", "bafy-abc", strings.Repeat("b", 256), strings.Repeat("b", 257),
	"app.bsky.feed.post", "app.bsky.feed.*", "com.example.fooBar", "a.b", "1a.b.c",
	"3ke6kg3wlch22", "jzzzzzzzzzzzz", "kzzzzzzzzzzzz", "3ke6kg3wlch2", "3ke6kg3wlch221", "3KE6KG3WLCH22", "3ke6kg3wlch2!",
}

// The fast validators must agree with indigo's syntax package exactly.
func TestIdentifiersMatchSyntax(t *testing.T) {
	for _, s := range identSeeds {
		checkIdentifiers(t, s)
	}
}

func FuzzIdentifiers(f *testing.F) {
	for _, s := range identSeeds {
		f.Add(s)
	}
	f.Fuzz(checkIdentifiers)
}

func checkIdentifiers(t *testing.T, s string) {
	_, fastErr := parseRecordKey(s)
	_, refErr := syntax.ParseRecordKey(s)
	if (fastErr == nil) != (refErr == nil) {
		t.Errorf("record key %q: fast err %v, syntax err %v", s, fastErr, refErr)
	}
	_, fastErr = parseCID(s)
	_, refErr = syntax.ParseCID(s)
	if (fastErr == nil) != (refErr == nil) {
		t.Errorf("cid %q: fast err %v, syntax err %v", s, fastErr, refErr)
	}
	_, fastErr = parseTID(s)
	_, refErr = syntax.ParseTID(s)
	if (fastErr == nil) != (refErr == nil) {
		t.Errorf("tid %q: fast err %v, syntax err %v", s, fastErr, refErr)
	}
	var cache nsidCache
	for range 2 { // miss, then hit
		n, fastErr := cache.parse(s)
		ref, refErr := syntax.ParseNSID(s)
		if (fastErr == nil) != (refErr == nil) || n != ref {
			t.Errorf("nsid %q: cache (%q, %v), syntax (%q, %v)", s, n, fastErr, ref, refErr)
		}
	}
}
