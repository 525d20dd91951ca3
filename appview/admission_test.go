package appview

import (
	"fmt"
	"strings"
	"sync"
	"testing"
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
