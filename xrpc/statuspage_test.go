package xrpc

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestStatusPage(t *testing.T) {
	var fail error
	cfg := testConfig(newFakeReader())
	cfg.Status = func(ctx context.Context) (any, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("status hook called without a deadline")
		}
		return map[string]any{"jetstream": map[string]int{"time_us": 42}}, fail
	}
	base := serve(t, cfg)
	res := do(t, http.MethodGet, base+"/status")
	if res.Status != http.StatusOK || strings.TrimSpace(string(res.Body)) != `{"jetstream":{"time_us":42}}` {
		t.Fatalf("GET /status = %d %s", res.Status, res.Body)
	}
	if res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", res.Header.Get("Cache-Control"))
	}
	fail = errors.New("database gone")
	res = do(t, http.MethodGet, base+"/status")
	if res.Status != http.StatusInternalServerError || decodeEnvelope(t, res.Body).Error != "InternalServerError" {
		t.Fatalf("failing hook: %d %s", res.Status, res.Body)
	}
}

func TestStatusPageWithoutHook(t *testing.T) {
	base := serve(t, testConfig(newFakeReader()))
	if res := do(t, http.MethodGet, base+"/status"); res.Status != http.StatusNotFound {
		t.Fatalf("GET /status without a hook: %d", res.Status)
	}
}
