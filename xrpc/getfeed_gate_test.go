package xrpc

import (
	"bytes"
	"context"
	"github.com/atfeeds/appview/internal/syncbuf"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/atfeeds/appview/backfill"
)

// gateFunc is a ViewerGate made of a function.
type gateFunc func(ctx context.Context) error

func (g gateFunc) Ensure(ctx context.Context, _ syntax.DID, _, _ string) error { return g(ctx) }

// A client that gives up while its first read is waited for (the backfill
// then lets the handler serve what the feed holds, and the read fails on
// the ended request) is not our failure: counted under 499, not 500, and
// not logged as an error. Before, every such request counted as a 500
// and fired any alert on 5xx (found by a review).
func TestGetFeedClientGoneIsNotA500(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs syncbuf.Buffer
	cfg := testConfig(filterStore(t, false))
	cfg.Registerer = reg
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	entered := make(chan struct{})
	cfg.Viewers = gateFunc(func(ctx context.Context) error {
		close(entered)
		<-ctx.Done()
		return nil // as backfill.Service.Ensure: serve what there is
	})
	base := serve(t, cfg)

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice), nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-entered; cancel() }()
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the request was answered (%d) though its client went away", res.StatusCode)
	}
	requests := newMetrics(reg).requests
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(requests.WithLabelValues("getFeed", "499")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no getFeed counted under 499; 500s: %v; logs:\n%s",
				testutil.ToFloat64(requests.WithLabelValues("getFeed", "500")), logs.String())
		}
		time.Sleep(time.Millisecond)
	}
	if n := testutil.ToFloat64(requests.WithLabelValues("getFeed", "500")); n != 0 {
		t.Errorf("%v getFeed 500s", n)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("logged as an error:\n%s", logs.String())
	}
}

// A first read asked for while the daemon stops is refused with a 503 and
// a Retry-After, not a 500.
func TestGetFeedFirstReadWhileStoppingIs503(t *testing.T) {
	cfg := testConfig(filterStore(t, false))
	cfg.Viewers = gateFunc(func(context.Context) error { return backfill.ErrStopping })
	base := serve(t, cfg)
	res := do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice))
	if res.Status != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" ||
		!bytes.Contains(res.Body, []byte(`"error":"NotEnoughResources"`)) {
		t.Fatalf("status %d, Retry-After %q, body %s; want 503 with Retry-After", res.Status, res.Header.Get("Retry-After"), res.Body)
	}
}
