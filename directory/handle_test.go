package directory

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory/plctest"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestResolveHandleNetwork covers DNS and HTTPS well-known resolution with a
// fake resolver and a fake transport (no network).
func TestResolveHandleNetwork(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "dns.example.com", pds1)
	plc.Add(bob, "web.example.com", pds2)

	txt := map[string][]string{
		"_atproto.dns.example.com": {"v=spf1 -all", "did=" + alice.String()},
		"_atproto.bad.example.com": {"did=not-a-did"},
	}
	wellKnown := map[string]string{
		"web.example.com":  "\n" + bob.String() + "\n",
		"junk.example.com": "<html>hello</html>",
	}
	plcClient := &http.Client{Transport: http.DefaultTransport}
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/.well-known/atproto-did" {
			if r.URL.Scheme != "https" {
				t.Errorf("well-known over %s", r.URL.Scheme)
			}
			body, ok := wellKnown[r.URL.Host]
			status := http.StatusOK
			if !ok {
				status, body = http.StatusNotFound, "not found"
			}
			return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}, Request: r}, nil
		}
		return plcClient.Transport.RoundTrip(r)
	})}
	d := New(Config{PLCURL: plc.URL(), HTTPClient: client})
	d.lookupTXT = func(_ context.Context, name string) ([]string, error) {
		if r, ok := txt[name]; ok {
			return r, nil
		}
		if name == "_atproto.flaky.example.com" {
			return nil, &net.DNSError{Err: "server misbehaving", Name: name, IsTemporary: true}
		}
		return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}

	for handle, want := range map[syntax.Handle]syntax.DID{"dns.example.com": alice, "web.example.com": bob} {
		ident, err := d.LookupHandle(t.Context(), handle)
		if err != nil || ident.DID != want || ident.Handle != handle {
			t.Fatalf("%s: got %+v %v", handle, ident, err)
		}
	}
	for _, handle := range []syntax.Handle{"bad.example.com", "junk.example.com", "none.example.com", "x.invalid", "x.local"} {
		if _, err := d.LookupHandle(t.Context(), handle); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: got %v, want ErrNotFound", handle, err)
		}
	}
	if _, err := d.LookupHandle(t.Context(), "flaky.example.com"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("flaky DNS: got %v, want ErrUnavailable", err)
	}
}

func TestDIDWebURL(t *testing.T) {
	for did, want := range map[syntax.DID]string{
		"did:web:Example.com":        "https://example.com/.well-known/did.json",
		"did:web:localhost%3A8080":   "",
		"did:web:example.com:user:1": "",
		"did:web:pds.internal":       "",
		"did:web:thing.test":         "https://thing.test/.well-known/did.json",
		"did:web:127.0.0.1":          "",
		"did:web:xn--bcher-kva.ch":   "https://xn--bcher-kva.ch/.well-known/did.json",
	} {
		got, err := didWebURL(did)
		if got != want || (want == "") != errors.Is(err, ErrNotFound) {
			t.Errorf("%s: got %q %v, want %q", did, got, err, want)
		}
	}
}

func TestParseDocument(t *testing.T) {
	doc, err := parseDocument(alice, plctest.Document(alice, "Alice.Example.com", "https://pds.example.com/base/"), false)
	if err != nil {
		t.Fatal(err)
	}
	if doc.handle != "alice.example.com" || doc.pds != "https://pds.example.com/base" {
		t.Fatalf("got %+v", doc)
	}
	// The full DID as service id, a non-handle first at:// entry, and an
	// unrelated service with a map endpoint.
	body := `{"id":"` + alice.String() + `","alsoKnownAs":["https://x.com","at://not a handle","at://second.example.com"],
		"service":[{"id":"#other","type":"X","serviceEndpoint":{"a":["b"]}},
		{"id":"` + alice.String() + `#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"http://pds.example.com:2583"}]}`
	doc, err = parseDocument(alice, []byte(body), false)
	if err != nil || doc.handle != "" || doc.pds != "http://pds.example.com:2583" {
		t.Fatalf("got %+v %v", doc, err)
	}
}
