package xrpc

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
)

func TestReadyz(t *testing.T) {
	var ready atomic.Bool
	cfg := testConfig(newFakeReader())
	cfg.Ready = func(ctx context.Context) error {
		if ctx.Err() != nil {
			t.Error("readiness check got a finished context")
		}
		if !ready.Load() {
			return errors.New("jetstream: not connected yet")
		}
		return nil
	}
	base := serve(t, cfg)

	check := func(wantStatus int, want readyResponse) {
		t.Helper()
		res := do(t, http.MethodGet, base+"/readyz")
		var got readyResponse
		if err := json.Unmarshal(res.Body, &got); err != nil {
			t.Fatalf("body %q: %v", res.Body, err)
		}
		if res.Status != wantStatus || got != want {
			t.Fatalf("GET /readyz = %d %+v, want %d %+v", res.Status, got, wantStatus, want)
		}
	}
	check(http.StatusServiceUnavailable, readyResponse{Status: "not ready", Reason: "jetstream: not connected yet"})
	// Liveness does not depend on readiness.
	if res := do(t, http.MethodGet, base+"/xrpc/_health"); res.Status != http.StatusOK {
		t.Fatalf("health while not ready: %d %s", res.Status, res.Body)
	}
	ready.Store(true)
	check(http.StatusOK, readyResponse{Status: "ready"})
}

func TestReadyzWithoutHook(t *testing.T) {
	base := serve(t, testConfig(newFakeReader()))
	res := do(t, http.MethodGet, base+"/readyz")
	if res.Status != http.StatusOK {
		t.Fatalf("GET /readyz without a hook: %d %s", res.Status, res.Body)
	}
}

// TestProbesAnswerHEAD: a load balancer probing with HEAD gets the
// status a GET would, for liveness and readiness alike; getFeed is a
// query and takes GET only.
func TestProbesAnswerHEAD(t *testing.T) {
	var ready atomic.Bool
	cfg := testConfig(newFakeReader())
	cfg.Ready = func(context.Context) error {
		if !ready.Load() {
			return errors.New("jetstream: not connected yet")
		}
		return nil
	}
	base := serve(t, cfg)
	for _, c := range []struct {
		path  string
		ready bool
		want  int
	}{
		{"/xrpc/_health", false, http.StatusOK},
		{"/readyz", false, http.StatusServiceUnavailable},
		{"/readyz", true, http.StatusOK},
		{getFeedURL + "?feed=following&actor=" + string(alice), true, http.StatusMethodNotAllowed},
	} {
		ready.Store(c.ready)
		res := do(t, http.MethodHead, base+c.path)
		if res.Status != c.want || len(res.Body) != 0 {
			t.Errorf("HEAD %s (ready %v) = %d with %d body bytes, want %d and none", c.path, c.ready, res.Status, len(res.Body), c.want)
		}
	}
	res := do(t, http.MethodPost, base+"/xrpc/_health")
	if got := res.Header.Get("Allow"); got != "GET, HEAD" {
		t.Errorf("POST /xrpc/_health: Allow %q, want GET, HEAD", got)
	}
}
