package directory

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/egress"
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
		// Rooted names: a relative one is also tried under the search domains.
		"_atproto.dns.example.com.": {"v=spf1 -all", "did=" + alice.String()},
		"_atproto.bad.example.com.": {"did=not-a-did"},
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
		if name == "_atproto.flaky.example.com." {
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
		{"id":"` + alice.String() + `#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"https://pds.example.com:2583"}]}`
	doc, err = parseDocument(alice, []byte(body), false)
	if err != nil || doc.handle != "" || doc.pds != "https://pds.example.com:2583" {
		t.Fatalf("got %+v %v", doc, err)
	}
}

// A handle's host answers with a redirect whose Location runs to 60 KB.
// The failure is cached for ErrTTL, and the cache is bounded by entries,
// not bytes: what it keeps of the message must be short, whoever chose it,
// and still say what kind of failure it was.
func TestACachedFailureKeepsAShortMessage(t *testing.T) {
	loc := "http://10.0.0.1/" + strings.Repeat("a", 60_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusFound)
	}))
	defer srv.Close()
	// The production client, with the handle's https host sent to srv.
	client := egress.NewClient(egress.Options{})
	client.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = "http", srv.Listener.Addr().String()
		return http.DefaultTransport.RoundTrip(r)
	})
	d := New(Config{HTTPClient: client})
	d.lookupTXT = func(_ context.Context, name string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}

	_, err := d.LookupHandle(t.Context(), "long.example.com")
	if err == nil {
		t.Fatal("a handle whose host only redirects resolved")
	}
	e, ok := d.handles.lookup("long.example.com")
	if !ok || e.err == nil {
		t.Fatalf("the failure was not cached: %v", err)
	}
	if n := len(e.err.Error()); n > maxCachedErrorBytes+len("…") {
		t.Fatalf("the cached failure keeps a %d-byte message, want at most %d", n, maxCachedErrorBytes)
	}
	if !errors.Is(e.err, ErrUnavailable) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the cached failure lost its kind: %v", e.err)
	}
}

// A handle lookup holds a DNS query and an HTTPS exchange for up to the
// timeout, and getFeed starts one for any handle a client names. Past
// MaxFetches a lookup fails at once, as unavailable, and is not cached,
// so it is tried again once the others are done.
func TestLookupsInFlightAreBounded(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "slow.example.com", pds1)
	plc.Add(bob, "quick.example.com", pds2)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	d := New(Config{PLCURL: plc.URL(), MaxFetches: 1,
		HTTPClient: egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: 5 * time.Second})})
	d.lookupTXT = func(ctx context.Context, name string) ([]string, error) {
		if name == "_atproto.slow.example.com." {
			started <- struct{}{}
			<-release
			return []string{"did=" + alice.String()}, nil
		}
		return []string{"did=" + bob.String()}, nil
	}

	slow := make(chan error, 1)
	go func() {
		_, err := d.LookupHandle(context.Background(), "slow.example.com")
		slow <- err
	}()
	<-started
	if _, err := d.LookupHandle(t.Context(), "quick.example.com"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a lookup past the bound: got %v, want ErrUnavailable", err)
	}
	if _, ok := d.handles.lookup("quick.example.com"); ok {
		t.Fatal("the refused lookup was cached")
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("the lookup in flight: %v", err)
	}
	if ident, err := d.LookupHandle(t.Context(), "quick.example.com"); err != nil || ident.DID != bob {
		t.Fatalf("once the slot is free: got %+v %v", ident, err)
	}
}

// HandleCached says whether LookupHandle would answer without the
// network: both the handle's resolution and its DID's document cached
// (getFeed charges a client's bucket only for lookups that are not).
func TestHandleCached(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	d, _ := newTestDirectory(t, plc, nil)
	if d.HandleCached("alice.test") || d.HandleCached("nobody.test") {
		t.Fatal("cached before any lookup")
	}
	if _, err := d.LookupHandle(t.Context(), "Alice.Test"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.LookupHandle(t.Context(), "nobody.test"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("nobody.test: %v", err)
	}
	if !d.HandleCached("alice.test") || !d.HandleCached("nobody.test") {
		t.Fatal("not cached after a lookup and a failure")
	}
	d.Purge(alice) // the document goes, and the handle its document claimed
	if d.HandleCached("alice.test") {
		t.Fatal("cached with the document purged")
	}

	// The handle resolved and cached, its document not (a 429 is not
	// cached): LookupHandle would ask the PLC.
	plc.Add(bob, "bob.test", pds2)
	plc.LimitDocuments(1, "")
	if _, err := d.LookupHandle(t.Context(), "bob.test"); !errors.Is(err, ErrBusy) {
		t.Fatalf("bob.test with the PLC limiting: %v", err)
	}
	if d.HandleCached("bob.test") {
		t.Fatal("cached with only the handle's resolution cached")
	}
}
