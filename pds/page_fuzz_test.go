package pds

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/pds/pdstest"
)

// FuzzDecodePage asserts invariants only: decodePage never panics, and what
// it keeps belongs to (repo, collection), has a CID and a valid UTF-8
// object value whose $type is the collection.
func FuzzDecodePage(f *testing.F) {
	okCID := pdstest.FakeCID([]byte("x"))
	good := rec(alice, posts, "3kaaaaaaaab22", post("hi"))
	seeds := []string{
		`{"records":[` + good + `],"cursor":"3kaaaaaaaab22"}`,
		`{"records":[]}`,
		`{"records":[` + good + `,` + rec(bob, posts, "3kaaaaaaaac22", post("x")) + `,7,null,"s",[]]}`,
		`{"records":[{"uri":"at://` + alice.String() + `/app.bsky.feed.post/x","cid":"` + okCID + `","value":{"$type":"app.bsky.feed.post","$type":"x"}}]}`,
		`{"records":[{"uri":"at://` + alice.String() + `/app.bsky.feed.post/x","cid":"` + okCID + `","value":{"$type":"app.bsky.feed.post","a":{"b":[[[[[]]]]]}}}]}`,
		`{"records":null,"cursor":null}`,
		`{"records":[],"cursor":"` + strings.Repeat("z", 2049) + `"}`,
		`{"records":[{"uri":"at://` + alice.String() + `/app.bsky.feed.post/..","cid":"` + okCID + `","value":{"$type":"app.bsky.feed.post"}}]}`,
		`{"records":[{"uri":"at://` + strings.ToUpper(alice.String()) + `/app.bsky.feed.post/x","cid":"` + okCID + `","value":{"$type":"app.bsky.feed.post"}}]}`,
		`{"records":[{"uri":"at://` + alice.String() + `/app.bsky.feed.post/x","cid":"` + okCID + `","value":{"$type":"app.bsky.feed.post\u0000"}}]}`,
		`{"records":[{"uri":"at://` + alice.String() + `/app.bsky.feed.post/x","cid":"` + okCID + `","value":{"$type":"app.bsky.feed.post"} }]}`,
		`{"records":[` + rec(alice, posts, "3kaaaaaaaac22", post("caf\xe9")) + `]}`,
		`{"records":[` + good + `]`, ``, `{}`, `[]`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		page, err := decodePage(body, alice, posts, MaxLimit)
		if err != nil {
			if page.Records != nil || page.Cursor != "" || page.Dropped() != 0 {
				t.Fatalf("failed decode returned %+v", page)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("a page that is not valid JSON was accepted: %q", body)
		}
		// The byte scan that splits the records array agrees with
		// encoding/json on how many elements it holds.
		var ref struct {
			Records []json.RawMessage `json:"records"`
		}
		if json.Unmarshal(body, &ref) == nil && len(page.Records)+page.Dropped() != len(ref.Records) {
			t.Fatalf("%d records + %d skipped, encoding/json finds %d elements: %q", len(page.Records), page.Dropped(), len(ref.Records), body)
		}
		if len(page.Cursor) > maxCursorBytes || page.Skipped < 0 || page.OverLimit < 0 || len(page.Records) > MaxLimit {
			t.Fatalf("bad page %+v", page)
		}
		for _, r := range page.Records {
			if r.URI.Authority().String() != alice.String() || r.URI.Collection() != posts || r.URI.RecordKey() != r.RKey {
				t.Fatalf("foreign record kept: %s", r.URI)
			}
			if _, err := syntax.ParseRecordKey(r.RKey.String()); err != nil {
				t.Fatalf("bad rkey kept: %q", r.RKey)
			}
			if _, err := syntax.ParseCID(r.CID); err != nil {
				t.Fatalf("bad cid kept: %q", r.CID)
			}
			if len(r.Value) > MaxRecordBytes {
				t.Fatalf("value of %d bytes kept", len(r.Value))
			}
			if !utf8.Valid(r.Value) {
				t.Fatalf("value is not valid UTF-8: %q", r.Value)
			}
			var v map[string]any
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("value is not an object: %s", r.Value)
			}
			if typ, _ := v["$type"].(string); typ != posts.String() {
				t.Fatalf("value $type %v kept", v["$type"])
			}
		}
	})
}
