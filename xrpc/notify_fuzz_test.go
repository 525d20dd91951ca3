package xrpc

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// FuzzParseNotifyBody feeds arbitrary bodies to notifyOfUpdate's parser:
// it returns 1 to MaxNotifyURIs distinct at-uris, or a 400 (413 past the
// body cap) with a message that does not echo the body; never a panic.
func FuzzParseNotifyBody(f *testing.F) {
	for _, seed := range []string{
		`{"uri":"at://did:plc:abc/app.bsky.feed.post/3k"}`,
		`{"uris":["at://did:plc:abc/app.bsky.feed.post/3k","at://did:plc:abc/app.bsky.feed.post/3k"]}`,
		`{"uri":"at://did:plc:abc/app.bsky.feed.post/3k","uris":["at://alice.test/app.bsky.feed.post/x"]}`,
		`  {"uris":[]}  `,
		`null`,
		`[]`,
		`{"uri":null}`,
		`{"uri":"x"} {}`,
		`{"uris":["` + strings.Repeat(`at://did:plc:a/a.b.c/x","`, 30) + `"]}`,
		"\xef\xbb\xbf{}",
		`{"uri":"at://did:plc:abc/app.bsky.feed.post/3k\u0000"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/xrpc/x.notifyOfUpdate", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		uris, xe := parseNotifyBody(req)
		if xe != nil {
			if uris != nil {
				t.Fatalf("error %v with URIs %v", xe, uris)
			}
			if (xe.Status != http.StatusBadRequest && xe.Status != http.StatusRequestEntityTooLarge) || xe.Message == "" {
				t.Fatalf("error %+v for body %q", xe, body)
			}
			if len(xe.Message) > 200 {
				t.Fatalf("message of %d bytes: %q", len(xe.Message), xe.Message)
			}
			return
		}
		if len(uris) == 0 || len(uris) > MaxNotifyURIs {
			t.Fatalf("%d URIs for body %q", len(uris), body)
		}
		seen := map[syntax.ATURI]bool{}
		for _, u := range uris {
			if seen[u] {
				t.Fatalf("URI %q twice", u)
			}
			seen[u] = true
			if _, err := syntax.ParseATURI(string(u)); err != nil {
				t.Fatalf("URI %q does not parse: %v", u, err)
			}
		}
	})
}
