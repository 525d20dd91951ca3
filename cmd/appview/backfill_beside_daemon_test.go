package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/atfeeds/appview/internal/syncbuf"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// startServe runs `appview serve` with environ until the test ends and
// returns its base URL once /xrpc/_health answers.
func startServe(t *testing.T, environ []string) string {
	t.Helper()
	js := jetstreamtest.NewServer()
	t.Cleanup(js.Close)
	addr := freeAddr(t)
	environ = append(environ, "APPVIEW_JETSTREAM_URLS="+js.URL(), "APPVIEW_HTTP_LISTEN="+addr)
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, environ, new(syncbuf.Buffer), &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, err := runCmd(t, environ, "health", "--timeout", "1s"); err == nil {
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not healthy:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func getFeed(t *testing.T, base, actor string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/xrpc/com.example.appview.getFeed?feed=following&limit=10&actor=" + actor)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A viewer `appview backfill` prepares beside a running daemon is an
// existing viewer to it once it reloads its viewer set (within
// viewerRefreshInterval): its reads pass no admission check. The daemon
// used to load the set only at start, so such a viewer was taken for a
// new one and refused with a 429 once its client's bucket was empty
// (found by a review).
func TestAViewerTheBackfillCommandPreparedIsKnownToTheDaemon(t *testing.T) {
	env, _, _ := backfillWorld(t)
	env = append(env,
		"APPVIEW_BACKFILL_ADMISSION_CLIENT_BURST=1",
		"APPVIEW_BACKFILL_ADMISSION_CLIENT_INTERVAL=24h",
	)
	base := startServe(t, env)

	out, logs, err := runCmd(t, env, "backfill", "--actor", "alice.test")
	if err != nil || !strings.Contains(out, "first read complete, 6 feed items") {
		t.Fatalf("backfill: %q %v\n%s", out, err, logs)
	}
	// Another new viewer from this client uses its one token.
	if code, body := getFeed(t, base, "did:plc:bob"); code != http.StatusOK {
		t.Fatalf("bob's first read: %d %s", code, body)
	}
	deadline := time.Now().Add(3 * viewerRefreshWait)
	for {
		code, body := getFeed(t, base, "did:plc:alice")
		if code == http.StatusOK {
			if n := strings.Count(body, `"uri"`); n != 6 {
				t.Errorf("alice's feed has %d items, want 6: %s", n, body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("getFeed of the viewer the command prepared: %d %s; want 200", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// viewerRefreshWait is backfill's viewerRefreshInterval.
const viewerRefreshWait = 5 * time.Second
