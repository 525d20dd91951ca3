package directory

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/internal/testclock"
)

const (
	alice = syntax.DID("did:plc:alice234567abcdefghijklm")
	bob   = syntax.DID("did:plc:bob234567abcdefghijklmno")
	pds1  = "https://pds1.example.com"
	pds2  = "https://pds2.example.com"
)

// newTestDirectory returns a Directory backed by plc, which also resolves
// handles. The HTTP client may reach loopback (the fake PLC lives there);
// PDS endpoints are still checked because AllowPrivateNetworks is off.
func newTestDirectory(t *testing.T, plc *plctest.Server, mod func(*Config)) (*Directory, *testclock.Clock) {
	t.Helper()
	clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := Config{
		PLCURL:            plc.URL(),
		HandleResolverURL: plc.URL(),
		HTTPClient:        egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: 5 * time.Second}),
		Now:               clk.Now,
	}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg), clk
}

func startPLC(t *testing.T) *plctest.Server {
	t.Helper()
	plc := plctest.NewServer()
	t.Cleanup(plc.Close)
	return plc
}

func TestLookupDID(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "Alice.Test", pds1+"/")
	d, _ := newTestDirectory(t, plc, nil)

	ident, err := d.LookupDID(t.Context(), alice)
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{DID: alice, Handle: "alice.test", PDS: pds1}
	if *ident != want {
		t.Fatalf("got %+v, want %+v", *ident, want)
	}

	// A handle that does not resolve back is not reported.
	plc.Add(bob, "bob.test", pds2)
	plc.SetHandle("bob.test", alice)
	ident, err = d.LookupDID(t.Context(), bob)
	if err != nil {
		t.Fatal(err)
	}
	if ident.Handle != "" || ident.PDS != pds2 {
		t.Fatalf("unverified handle: got %+v", *ident)
	}
}

// A directory that skips handle verification for the backfill still
// verifies for LookupDIDWithHandle, from the same cached document.
func TestLookupDIDWithHandle(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	plc.Add(bob, "bob.test", pds2)
	plc.SetHandle("bob.test", alice)
	d, _ := newTestDirectory(t, plc, func(c *Config) { c.SkipHandleVerification = true })

	if ident, err := d.LookupDID(t.Context(), alice); err != nil || ident.Handle != "" {
		t.Fatalf("LookupDID = %+v, %v; want no handle", ident, err)
	}
	ident, err := d.LookupDIDWithHandle(t.Context(), alice)
	if err != nil || *ident != (Identity{DID: alice, Handle: "alice.test", PDS: pds1}) {
		t.Fatalf("LookupDIDWithHandle = %+v, %v", ident, err)
	}
	if plc.RequestsFor(alice) != 1 {
		t.Errorf("document fetched %d times, want once", plc.RequestsFor(alice))
	}
	if ident, err := d.LookupDIDWithHandle(t.Context(), bob); err != nil || ident.Handle != "" || ident.PDS != pds2 {
		t.Fatalf("unverified handle: %+v, %v", ident, err)
	}
}

func TestLookupHandle(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	plc.SetHandle("impostor.test", alice)
	d, _ := newTestDirectory(t, plc, nil)

	ident, err := d.LookupHandle(t.Context(), "ALICE.test")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Identity{DID: alice, Handle: "alice.test", PDS: pds1}); *ident != want {
		t.Fatalf("got %+v, want %+v", *ident, want)
	}
	if _, err := d.LookupHandle(t.Context(), "impostor.test"); !errors.Is(err, ErrHandleMismatch) {
		t.Fatalf("impostor: %v", err)
	}
	if _, err := d.LookupHandle(t.Context(), "nobody.test"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown handle: %v", err)
	}
	before := plc.HandleRequests()
	if _, err := d.LookupHandle(t.Context(), "handle.invalid"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("handle.invalid: %v", err)
	}
	if plc.HandleRequests() != before {
		t.Fatal("handle.invalid was sent to the resolver")
	}
}

func TestCacheTTL(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	d, clk := newTestDirectory(t, plc, func(c *Config) {
		c.HitTTL = time.Hour
		c.ErrTTL = time.Minute
	})
	ctx := t.Context()
	for range 3 {
		if _, err := d.LookupDID(ctx, alice); err != nil {
			t.Fatal(err)
		}
	}
	if got := plc.RequestsFor(alice); got != 1 {
		t.Fatalf("cached lookups: %d requests", got)
	}
	clk.Advance(59 * time.Minute)
	d.LookupDID(ctx, alice)
	if got := plc.RequestsFor(alice); got != 1 {
		t.Fatalf("before expiry: %d requests", got)
	}
	clk.Advance(time.Minute)
	d.LookupDID(ctx, alice)
	if got := plc.RequestsFor(alice); got != 2 {
		t.Fatalf("after expiry: %d requests", got)
	}

	// Failures are cached for ErrTTL.
	for range 2 {
		if _, err := d.LookupDID(ctx, bob); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown DID: %v", err)
		}
	}
	if got := plc.RequestsFor(bob); got != 1 {
		t.Fatalf("cached failure: %d requests", got)
	}
	plc.Add(bob, "bob.test", pds2)
	clk.Advance(time.Minute)
	if _, err := d.LookupDID(ctx, bob); err != nil {
		t.Fatalf("after error TTL: %v", err)
	}
}

func TestConcurrentLookupsShareOneFetch(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	plc.Block()
	d, _ := newTestDirectory(t, plc, nil)

	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for range n {
		wg.Go(func() {
			_, err := d.LookupDID(t.Context(), alice)
			errs <- err
		})
		wg.Go(func() {
			_, err := d.LookupHandle(t.Context(), "alice.test")
			errs <- err
		})
	}
	waitFor(t, func() bool { return plc.Requests() >= 1 })
	plc.Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := plc.Requests(); got != 1 {
		t.Fatalf("document requests: got %d, want 1", got)
	}
	if got := plc.HandleRequests(); got != 1 {
		t.Fatalf("handle requests: got %d, want 1", got)
	}
}

func TestCallerCancellationDoesNotFailOthers(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "", pds1)
	plc.Block()
	d, _ := newTestDirectory(t, plc, nil)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := d.LookupDID(ctx, alice)
		done <- err
	}()
	waitFor(t, func() bool { return plc.Requests() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	plc.Release()
	ident, err := d.LookupDID(t.Context(), alice)
	if err != nil || ident.PDS != pds1 {
		t.Fatalf("second caller: %+v %v", ident, err)
	}
	if got := plc.Requests(); got != 1 {
		t.Fatalf("requests: got %d, want 1 (the detached fetch is shared)", got)
	}
}

func TestPurge(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	d, _ := newTestDirectory(t, plc, nil)
	ctx := t.Context()
	if _, err := d.LookupHandle(ctx, "alice.test"); err != nil {
		t.Fatal(err)
	}

	// alice moves PDS and changes handle; an identity event purges her.
	plc.Add(alice, "alice2.test", pds2)
	plc.SetHandle("alice.test", "")
	d.Purge(alice)
	ident, err := d.LookupDID(ctx, alice)
	if err != nil || *ident != (Identity{DID: alice, Handle: "alice2.test", PDS: pds2}) {
		t.Fatalf("after purge: %+v %v", ident, err)
	}
	if _, err := d.LookupHandle(ctx, "alice.test"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old handle after purge: %v", err)
	}
}

func TestPurgeDuringFetch(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "", pds1)
	plc.Block()
	d, _ := newTestDirectory(t, plc, nil)

	done := make(chan *Identity, 1)
	go func() {
		ident, _ := d.LookupDID(t.Context(), alice)
		done <- ident
	}()
	waitFor(t, func() bool { return plc.Requests() == 1 })
	d.Purge(alice) // the document being fetched may already be stale
	plc.Add(alice, "", pds2)
	plc.Release()
	<-done

	ident, err := d.LookupDID(t.Context(), alice)
	if err != nil || ident.PDS != pds2 {
		t.Fatalf("the fetch that raced the purge was cached: %+v %v", ident, err)
	}
	if got := plc.Requests(); got != 2 {
		t.Fatalf("requests: got %d, want 2", got)
	}
}

// PurgeAll (a gap in the stream: the identity events in it are lost)
// forgets every cached document and handle, and a fetch under way at that
// moment is not cached.
func TestPurgeAll(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	plc.Add(bob, "", pds1)
	d, _ := newTestDirectory(t, plc, nil)
	ctx := t.Context()
	if _, err := d.LookupHandle(ctx, "alice.test"); err != nil {
		t.Fatal(err)
	}
	base := plc.Requests()
	plc.Block()
	done := make(chan struct{})
	go func() {
		d.LookupDID(t.Context(), bob)
		close(done)
	}()
	waitFor(t, func() bool { return plc.Requests() == base+1 })
	plc.Add(alice, "alice2.test", pds2)
	plc.SetHandle("alice.test", "")
	plc.Add(bob, "", pds2)
	d.PurgeAll()
	plc.Release()
	<-done

	if ident, err := d.LookupDID(ctx, alice); err != nil || *ident != (Identity{DID: alice, Handle: "alice2.test", PDS: pds2}) {
		t.Errorf("alice after PurgeAll: %+v %v", ident, err)
	}
	if _, err := d.LookupHandle(ctx, "alice.test"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old handle after PurgeAll: %v", err)
	}
	before := plc.Requests()
	if ident, err := d.LookupDID(ctx, bob); err != nil || ident.PDS != pds2 || plc.Requests() != before+1 {
		t.Errorf("the fetch that raced PurgeAll was cached: %+v %v, %d requests", ident, err, plc.Requests()-before)
	}
}

func TestEviction(t *testing.T) {
	plc := startPLC(t)
	dids := []syntax.DID{alice, bob, "did:plc:carol34567abcdefghijklmn"}
	for _, did := range dids {
		plc.Add(did, "", pds1)
	}
	d, _ := newTestDirectory(t, plc, func(c *Config) { c.MaxEntries = 2 })
	for _, did := range dids {
		if _, err := d.LookupDID(t.Context(), did); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.docs.len(); n != 2 {
		t.Fatalf("cache holds %d entries, want 2", n)
	}
	d.LookupDID(t.Context(), alice) // evicted first: fetched again
	d.LookupDID(t.Context(), dids[2])
	if a, c := plc.RequestsFor(alice), plc.RequestsFor(dids[2]); a != 2 || c != 1 {
		t.Fatalf("requests: alice %d (want 2), carol %d (want 1)", a, c)
	}
}

func TestBadDocuments(t *testing.T) {
	plc := startPLC(t)
	d, _ := newTestDirectory(t, plc, nil)
	big := strings.Repeat(`"at://x.test",`, 6000)
	for name, tc := range map[string]struct {
		body string
		want error
	}{
		"not json":       {`<html>`, ErrInvalidDocument},
		"truncated":      {string(plctest.Document(alice, "a.test", pds1)[:40]), ErrInvalidDocument},
		"other did":      {string(plctest.Document(bob, "a.test", pds1)), ErrInvalidDocument},
		"no pds":         {`{"id":"` + alice.String() + `","service":[]}`, ErrInvalidDocument},
		"wrong type":     {`{"id":"` + alice.String() + `","service":[{"id":"#atproto_pds","type":"Other","serviceEndpoint":"https://x.com"}]}`, ErrInvalidDocument},
		"object":         {`{"id":"` + alice.String() + `","service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":{"uri":"https://x.com"}}]}`, ErrInvalidDocument},
		"ftp endpoint":   {string(plctest.Document(alice, "", "ftp://pds.example.com")), ErrInvalidDocument},
		"no host":        {string(plctest.Document(alice, "", "https:///xrpc")), ErrInvalidDocument},
		"userinfo":       {string(plctest.Document(alice, "", "https://u:p@pds.example.com")), ErrInvalidDocument},
		"long endpoint":  {string(plctest.Document(alice, "", "https://pds.example.com/"+strings.Repeat("a", 60_000))), ErrInvalidDocument},
		"oversized":      {`{"id":"` + alice.String() + `","alsoKnownAs":[` + big + `"at://a.test"]}`, ErrInvalidDocument},
		"loopback":       {string(plctest.Document(alice, "", "http://127.0.0.1:2583")), ErrForbiddenPDS},
		"private":        {string(plctest.Document(alice, "", "http://10.0.0.1")), ErrForbiddenPDS},
		"metadata":       {string(plctest.Document(alice, "", "http://169.254.169.254/latest")), ErrForbiddenPDS},
		"localhost":      {string(plctest.Document(alice, "", "http://localhost:2583")), ErrForbiddenPDS},
		"ipv6 loopback":  {string(plctest.Document(alice, "", "http://[::1]:2583")), ErrForbiddenPDS},
		"mapped private": {string(plctest.Document(alice, "", "http://[::ffff:192.168.0.1]")), ErrForbiddenPDS},
	} {
		t.Run(name, func(t *testing.T) {
			d.Purge(alice)
			plc.SetDocument(alice, []byte(tc.body))
			_, err := d.LookupDID(t.Context(), alice)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}

	t.Run("content type", func(t *testing.T) {
		d.Purge(alice)
		plc.Add(alice, "", pds1)
		plc.SetContentType("text/html")
		defer plc.SetContentType("application/json")
		if _, err := d.LookupDID(t.Context(), alice); !errors.Is(err, ErrInvalidDocument) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("tombstoned", func(t *testing.T) {
		d.Purge(alice)
		plc.Tombstone(alice)
		if _, err := d.LookupDID(t.Context(), alice); !errors.Is(err, ErrNotFound) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unsupported method", func(t *testing.T) {
		if _, err := d.LookupDID(t.Context(), "did:key:z6Mkabc"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestPrivatePDSAllowed(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", "http://127.0.0.1:2583")
	d, _ := newTestDirectory(t, plc, func(c *Config) { c.AllowPrivateNetworks = true })
	ident, err := d.LookupHandle(t.Context(), "alice.test")
	if err != nil || ident.PDS != "http://127.0.0.1:2583" {
		t.Fatalf("got %+v %v", ident, err)
	}
}

// A failure that may pass (the directory answering 5xx but 503) is cached for a
// quarter of ErrTTL: the backfill retries a listing whose identity did
// not resolve a minute later, and with the failure cached for the whole
// ErrTTL (2 min) that retry was answered from the cache, an attempt spent
// on nothing (raised by a review).
func TestAPassingFailureIsCachedBriefly(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	plc := startPLC(t)
	plc.Add(alice, "", pds1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A 502, not a 503: a 503 pauses the PLC and is not cached
		// (TestAPLCRateLimitPausesEveryLookup).
		if failing.Load() {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		http.Redirect(w, r, plc.URL()+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	d, clk := newTestDirectory(t, plc, func(c *Config) {
		c.PLCURL = srv.URL
		c.ErrTTL = 2 * time.Minute
	})
	if _, err := d.LookupDID(t.Context(), alice); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
	failing.Store(false)
	clk.Advance(29 * time.Second)
	if _, err := d.LookupDID(t.Context(), alice); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("within a quarter of ErrTTL: %v, want the cached failure", err)
	}
	clk.Advance(time.Second)
	if _, err := d.LookupDID(t.Context(), alice); err != nil {
		t.Fatalf("after a quarter of ErrTTL: %v", err)
	}
}

func TestPLCFailureIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	d := New(Config{PLCURL: srv.URL, HTTPClient: egress.NewClient(egress.Options{AllowPrivateNetworks: true})})
	if _, err := d.LookupDID(t.Context(), alice); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
}

func TestPLCOnLoopbackRefusedByDefaultClient(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "", pds1)
	d := New(Config{PLCURL: plc.URL()}) // default client: private networks refused
	_, err := d.LookupDID(t.Context(), alice)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, egress.ErrForbiddenAddress) {
		t.Fatalf("got %v", err)
	}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met before the deadline")
		}
		time.Sleep(time.Millisecond)
	}
}

// bob takes the handle alice left, and the identity events of both are
// purged as the ingester does. alice's document had already left the
// document cache (bounded apart; LookupDID fills only it), so Purge(alice)
// could not find the handle it claimed, and shared.test -> alice stayed
// cached: bob's handle did not verify, and the profile fetcher stored "no
// handle" for him as verified (found by a review). PurgeIdentity also
// forgets the handle the event names.
func TestPurgeIdentityForgetsTheHandleTheEventNames(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "shared.test", pds1)
	plc.Add(bob, "bob.test", pds2)
	carol := syntax.DID("did:plc:carol34567abcdefghijklmn")
	plc.Add(carol, "", pds1)
	d, _ := newTestDirectory(t, plc, func(c *Config) { c.MaxEntries = 2 })
	ctx := t.Context()
	if ident, err := d.LookupDIDWithHandle(ctx, alice); err != nil || ident.Handle != "shared.test" {
		t.Fatalf("alice: %+v %v", ident, err)
	}
	for _, did := range []syntax.DID{bob, carol} { // push alice's document out
		if _, err := d.LookupDID(ctx, did); err != nil {
			t.Fatal(err)
		}
	}
	plc.Add(alice, "alice2.test", pds1)
	plc.SetHandle("alice2.test", alice)
	plc.Add(bob, "shared.test", pds2)
	plc.SetHandle("shared.test", bob)
	d.PurgeIdentity(alice, "alice2.test")
	d.PurgeIdentity(bob, "shared.test")
	ident, err := d.LookupDIDWithHandle(ctx, bob)
	if err != nil || ident.Handle != "shared.test" {
		t.Fatalf("bob after both identity events: %+v %v; want handle shared.test", ident, err)
	}
	if got, err := d.LookupHandle(ctx, "shared.test"); err != nil || got.DID != bob {
		t.Fatalf("shared.test resolves to %+v, %v; want bob", got, err)
	}
	d.PurgeIdentity(bob, "not a handle!") // a bad hint forgets the document only
}

// A PDS endpoint keys the per-host request limits and pauses, so one host
// must have one spelling: a DID document spelling it otherwise must not
// buy more requests at once to the same server (found by a review, which
// reached one PDS with 16 requests at once through four spellings of it).
func TestPDSEndpointIsSpelledOneWay(t *testing.T) {
	for endpoint, want := range map[string]string{
		"https://PDS.Example.COM:443/":  "https://pds.example.com",
		"http://pds.example.com.:80":    "http://pds.example.com",
		"https://pds.example.com.":      "https://pds.example.com",
		"https://pds.example.com:8443/": "https://pds.example.com:8443",
		"HTTPS://pds.example.com/xrpc/": "https://pds.example.com/xrpc",
		"http://[::1]:80":               "http://[::1]",
		"http://[::1]:2583":             "http://[::1]:2583",
		"http://LOCALHOST:2583":         "http://localhost:2583",
	} {
		got, err := checkPDSURL(endpoint, true)
		if err != nil || got != want {
			t.Errorf("%s: got %q %v, want %q", endpoint, got, err, want)
		}
	}
	if _, err := checkPDSURL("https://./", true); !errors.Is(err, ErrInvalidDocument) {
		t.Errorf("a host of a dot alone: got %v, want ErrInvalidDocument", err)
	}
	if _, err := checkPDSURL("http://LOCALHOST.:2583", false); !errors.Is(err, ErrForbiddenPDS) {
		t.Errorf("loopback spelled in capitals with a trailing dot: got %v, want ErrForbiddenPDS", err)
	}
}

// A host name in other Unicode spellings (full-width letters, an
// ideographic full stop, a precomposed letter) is dialled by Go's
// transport under its IDNA ASCII form, the server the plain spelling
// reaches: each spelling kept as given got per-host request slots and
// pauses of its own, and the loopback check of the document saw a name
// that is not "localhost".
func TestPDSEndpointIsSpelledOneWayInUnicode(t *testing.T) {
	for endpoint, want := range map[string]string{
		"https://ＰＤＳ.example.com":        "https://pds.example.com",
		"https://ｐｄｓ.example.com:8443/":  "https://pds.example.com:8443",
		"https://pds\u3002example.com":   "https://pds.example.com",
		"https://pd\u015b.example.com":   "https://xn--pd-3sa.example.com",
		"https://xn--pd-3sa.example.com": "https://xn--pd-3sa.example.com",
	} {
		got, err := checkPDSURL(endpoint, false)
		if err != nil || got != want {
			t.Errorf("%s: got %q %v, want %q", endpoint, got, err, want)
		}
	}
	for _, endpoint := range []string{"http://ｌｏｃａｌｈｏｓｔ:2583", "http://ＬＯＣＡＬＨＯＳＴ\u3002:2583", "http://pds.ｌｏｃａｌｈｏｓｔ"} {
		if _, err := checkPDSURL(endpoint, false); !errors.Is(err, ErrForbiddenPDS) {
			t.Errorf("%s: got %v, want ErrForbiddenPDS", endpoint, err)
		}
	}
	if _, err := checkPDSURL("https://a\u2488.example.com", true); !errors.Is(err, ErrInvalidDocument) {
		t.Errorf("a host IDNA refuses: got %v, want ErrInvalidDocument", err)
	}
}

// An IP literal has many spellings of one address (IPv6 zero groups
// written out or compressed elsewhere, leading zeros, an IPv4 address
// mapped into IPv6), and a port may carry leading zeros: Go dials the
// same server for each, so each kept as given had per-host request slots
// and pauses of its own.
func TestPDSEndpointIPLiteralsAndPortsAreSpelledOneWay(t *testing.T) {
	for endpoint, want := range map[string]string{
		"https://[2606:4700:0:0:0:0:0:1111]":     "https://[2606:4700::1111]",
		"https://[2606:4700:0000::0:1111]:8443/": "https://[2606:4700::1111]:8443",
		"https://[2606:4700::0001:1111]":         "https://[2606:4700::1:1111]",
		"https://[2606:4700::1111]:443":          "https://[2606:4700::1111]",
		"https://[::ffff:1.2.3.4]":               "https://1.2.3.4",
		"https://[::FFFF:102:304]:8443":          "https://1.2.3.4:8443",
		"https://pds.example.com:0443":           "https://pds.example.com",
		"https://pds.example.com:008443":         "https://pds.example.com:8443",
	} {
		got, err := checkPDSURL(endpoint, false)
		if err != nil || got != want {
			t.Errorf("%s: got %q %v, want %q", endpoint, got, err, want)
		}
	}
	for _, endpoint := range []string{"https://pds.example.com:0", "https://pds.example.com:65536", "https://pds.example.com:99999999999999999999"} {
		if _, err := checkPDSURL(endpoint, true); !errors.Is(err, ErrInvalidDocument) {
			t.Errorf("%s: got %v, want ErrInvalidDocument", endpoint, err)
		}
	}
}
