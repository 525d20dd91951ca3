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
