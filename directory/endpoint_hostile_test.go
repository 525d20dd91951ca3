package directory

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/egress"
)

// A public PDS endpoint must be https: records fetched over http could be
// changed on the way, and an http endpoint aimed requests at any port of
// any public host. Private networks, where allowed, may use http, and
// their endpoints are spelled one way as before.
func TestAPublicPDSEndpointMustBeHTTPS(t *testing.T) {
	for _, endpoint := range []string{"http://pds.example.com", "http://pds.example.com:25", "http://1.2.3.4:8080"} {
		if _, err := checkPDSURL(endpoint, false); !errors.Is(err, ErrInvalidDocument) {
			t.Errorf("%s: got %v, want ErrInvalidDocument", endpoint, err)
		}
	}
	if got, err := checkPDSURL("https://pds.example.com", false); err != nil || got != "https://pds.example.com" {
		t.Errorf("https endpoint: got %q %v", got, err)
	}
	if got, err := checkPDSURL("http://1.2.3.4:00080/x", true); err != nil || got != "http://1.2.3.4/x" {
		t.Errorf("http with private networks allowed: got %q %v, want http://1.2.3.4/x", got, err)
	}
}

// An IPv6 zone names a link, not a host: "[2606:4700::1111%a]", "%b", …
// all reach one public address, and each spelling had request slots and
// a pause of its own. An endpoint with a zone is refused.
func TestPDSEndpointWithAnIPv6ZoneIsRefused(t *testing.T) {
	for _, allowPrivate := range []bool{false, true} {
		for _, endpoint := range []string{"https://[2606:4700::1111%25a]", "https://[2606:4700::1111%25eth0]:8443", "http://[fe80::1%25lo]"} {
			if _, err := checkPDSURL(endpoint, allowPrivate); err == nil {
				t.Errorf("%s (private networks allowed: %v): accepted", endpoint, allowPrivate)
			}
		}
	}
}

// A DID goes into the PLC directory's URL escaped: one carrying '%'
// ("did:plc:%2e%2e%2f…" is a valid DID) asked the PLC host for another
// path as it was.
func TestADIDIsEscapedInThePLCURL(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	plc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer plc.Close()
	d := New(Config{PLCURL: plc.URL, HTTPClient: egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: 5 * time.Second})})
	did, err := syntax.ParseDID("did:plc:%2e%2e%2fadmin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.LookupDID(t.Context(), did); err == nil {
		t.Fatal("resolved a DID the PLC does not know")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/did:plc:%252e%252e%252fadmin" {
		t.Errorf("PLC asked for %q, want the DID escaped: [/did:plc:%%252e%%252e%%252fadmin]", paths)
	}
}
