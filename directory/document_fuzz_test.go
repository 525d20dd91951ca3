package directory

import (
	"errors"
	"net/url"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/egress"
)

// FuzzParseDocument asserts invariants only: parseDocument never panics,
// fails only with ErrInvalidDocument or ErrForbiddenPDS, and what it accepts
// is a normalized handle and a public http(s) PDS URL.
func FuzzParseDocument(f *testing.F) {
	seeds := []string{
		string(plctest.Document(alice, "alice.test", "https://pds.example.com")),
		string(plctest.Document(alice, "", "http://127.0.0.1:2583")),
		string(plctest.Document(alice, "alice.test", "https://u@pds.example.com/?q#f")),
		string(plctest.Document(bob, "bob.test", "https://pds.example.com")),
		`{"id":"` + alice.String() + `","service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"https://[::ffff:a00:1]"}]}`,
		`{"id":"` + alice.String() + `","alsoKnownAs":["at://A.B"],"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"HTTPS://PDS.example.com"}]}`,
		`{"id":"` + alice.String() + `","service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":null}]}`,
		`{"id":null}`, `[]`, `null`, ``, `{"id":"` + alice.String() + `","alsoKnownAs":[1]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
	}
	f.Add(plctest.Document(alice, "", "http://10.0.0.1"), true)
	f.Fuzz(func(t *testing.T, body []byte, allowPrivate bool) {
		doc, err := parseDocument(alice, body, allowPrivate)
		if err != nil {
			if !errors.Is(err, ErrInvalidDocument) && !errors.Is(err, ErrForbiddenPDS) {
				t.Fatalf("unexpected error class: %v", err)
			}
			if doc != (document{}) {
				t.Fatalf("failed parse returned %+v", doc)
			}
			return
		}
		if doc.handle != "" {
			h, err := syntax.ParseHandle(doc.handle.String())
			if err != nil || h.Normalize() != doc.handle || h.IsInvalidHandle() {
				t.Fatalf("bad handle %q", doc.handle)
			}
		}
		u, err := url.Parse(doc.pds)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("bad PDS URL %q", doc.pds)
		}
		if !allowPrivate && egress.CheckHost(u.Hostname()) != nil {
			t.Fatalf("forbidden PDS accepted: %q", doc.pds)
		}
	})
}
