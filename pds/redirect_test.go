package pds

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A PDS host that redirects to another host is not followed there: the
// backfill counts requests, slots and 429 pauses by the host a DID
// document names, and many documents naming hosts that each redirect to
// one victim PDS would send it the backfill's whole concurrency, its 429s
// pausing the redirecting hosts. A redirect within the host is followed.
func TestARedirectToAnotherHostIsRefused(t *testing.T) {
	victim := startPDS(t)
	victim.AddRecord(alice, posts, tid(1), post("one"))
	var reached atomic.Int32
	victimFront := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		http.Redirect(w, r, victim.URL()+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer victimFront.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, victimFront.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	c := newTestClient(5 * time.Second)

	_, err := c.ListRecords(t.Context(), redirector.URL, alice, posts, 10, "")
	if err == nil || !strings.Contains(err.Error(), "refused redirect") {
		t.Fatalf("listRecords through a redirect to another host: %v, want it refused", err)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the other host got %d requests, want none", n)
	}

	// Within one host: /old/xrpc/… moves to /xrpc/… on the same server.
	same := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.RequestURI(), "/old"); ok {
			http.Redirect(w, r, rest, http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"records":[{"uri":"at://` + string(alice) + `/app.bsky.feed.post/` + string(tid(1)) +
			`","cid":"bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y","value":` + post("one") + `}]}`))
	}))
	defer same.Close()
	page, err := c.ListRecords(t.Context(), same.URL+"/old", alice, posts, 10, "")
	if err != nil {
		t.Fatalf("listRecords through a redirect within the host: %v", err)
	}
	if len(page.Records) != 1 {
		t.Errorf("%d records through a redirect within the host, want 1", len(page.Records))
	}
}
