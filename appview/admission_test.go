package appview

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// TestFirstReadsAreAdmittedPerClient: a burst of first reads for unknown
// actors from one client is answered with 429 and Retry-After once its
// bucket is empty, while an existing viewer keeps getting 200s.
func TestFirstReadsAreAdmittedPerClient(t *testing.T) {
	n := newNetwork(t)
	alice := n.account("alice")
	cfg := n.config(t)
	td := startDaemon(t, n.js, cfg)
	if r, err := httpGet(td.base + "/xrpc/com.example.appview.getFeed?feed=following&actor=" + alice); err != nil || r.status != 200 {
		t.Fatalf("alice's first read: %v %+v", err, r)
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := httpGet(td.base + fmt.Sprintf("/xrpc/com.example.appview.getFeed?feed=following&actor=did:plc:unknown%d", i))
			if err != nil {
				t.Error(err)
				return
			}
			if r.status == 429 && !strings.Contains(r.body, `"error":"RateLimitExceeded"`) {
				t.Errorf("429 body %s", r.body)
			}
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[429] == 0 || codes[200] == 0 || codes[200]+codes[429] != 40 {
		t.Errorf("status codes %v, want some 200s then 429s and nothing else", codes)
	}
	for range 5 {
		if r, err := httpGet(td.base + "/xrpc/com.example.appview.getFeed?feed=following&actor=" + alice); err != nil || r.status != 200 {
			t.Fatalf("existing viewer refused under load: %v %+v", err, r)
		}
	}
}

// TestAdmissionConfigTakesEffect: the backfill.admission settings reach
// the running daemon. With one first read running, none queued and a
// bucket of three, an unknown actor asking while another's first read is
// stuck gets 503 with the configured Retry-After and leaves no viewer
// behind; the next one from the same client gets 429 with the bucket's
// wait; the existing viewer still gets 200 throughout.
func TestAdmissionConfigTakesEffect(t *testing.T) {
	n := newNetwork(t)
	alice := n.account("alice")
	stuck, refused, limited := n.account("stuck"), n.account("refused"), n.account("limited")
	cfg := n.config(t)
	cfg.Backfill.Admission = AdmissionConfig{
		MaxRunning: 1, MaxQueued: 0, ClientInterval: time.Hour, ClientBurst: 3,
		MaxClients: 10, RetryAfter: 7 * time.Second,
	}
	td := startDaemon(t, n.js, cfg)
	feedURL := func(actor string) string {
		return td.base + "/xrpc/com.example.appview.getFeed?feed=following&actor=" + actor
	}
	if r, err := httpGet(feedURL(alice)); err != nil || r.status != 200 { // token 1
		t.Fatalf("alice's first read: %v %+v", err, r)
	}

	// The only running slot: a first read stuck on its DID lookup.
	n.plc.Block()
	defer n.plc.Release()
	stuckDone := make(chan response, 1)
	go func() { // token 2
		r, err := httpGet(feedURL(stuck))
		if err != nil {
			t.Error(err)
		}
		stuckDone <- r
	}()
	for deadline := time.Now().Add(10 * time.Second); n.plc.RequestsFor(syntax.DID(stuck)) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first read of stuck never asked the PLC")
		}
	}

	res, err := http.Get(feedURL(refused)) // token 3, but no place to run
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "7" {
		t.Errorf("with the one slot taken: %d, Retry-After %q; want 503 with 7", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if td.Store().KnownViewer(syntax.DID(refused), "following") {
		t.Error("a refused actor was registered as a viewer")
	}

	res, err = http.Get(feedURL(limited)) // the bucket is empty for an hour
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	wait, _ := strconv.Atoi(res.Header.Get("Retry-After"))
	if res.StatusCode != http.StatusTooManyRequests || wait < 3500 || wait > 3600 {
		t.Errorf("with the bucket empty: %d, Retry-After %q; want 429 with about an hour", res.StatusCode, res.Header.Get("Retry-After"))
	}

	if r, err := httpGet(feedURL(alice)); err != nil || r.status != 200 {
		t.Errorf("existing viewer refused with the queue full and the bucket empty: %v %+v", err, r)
	}
	n.plc.Release()
	if r := <-stuckDone; r.status != 200 {
		t.Errorf("stuck's first read: %+v", r)
	}
}

// Behind a reverse proxy listed in http.trusted_proxies, each client
// behind it has a bucket of its own (the address the proxy appended to
// X-Forwarded-For); without the setting all of them share the proxy's.
func TestTrustedProxiesGiveEachClientBehindThemItsOwnBucket(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprintf("trusted=%v", trusted), func(t *testing.T) {
			n := newNetwork(t)
			actors := []string{n.account("a"), n.account("b"), n.account("c")}
			cfg := n.config(t)
			cfg.Backfill.Admission.ClientInterval = time.Hour
			cfg.Backfill.Admission.ClientBurst = 2
			if trusted {
				cfg.HTTP.TrustedProxies = []string{"127.0.0.1"}
			}
			td := startDaemon(t, n.js, cfg)
			var codes []int
			for i, actor := range actors {
				req, err := http.NewRequest(http.MethodGet, td.base+"/xrpc/com.example.appview.getFeed?feed=following&actor="+actor, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				codes = append(codes, res.StatusCode)
			}
			want := []int{200, 200, 429} // one bucket of two: the proxy's
			if trusted {
				want = []int{200, 200, 200}
			}
			if fmt.Sprint(codes) != fmt.Sprint(want) {
				t.Errorf("first reads of three clients behind the proxy: %v, want %v", codes, want)
			}
		})
	}
}
