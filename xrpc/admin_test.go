package xrpc

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The admin server answers the operator's endpoints and the probes, and
// nothing of the public API: getFeed and unknown paths are 404 envelopes.
func TestAdminServerRoutes(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "appview_test_total", Help: "t"}))
	base := serveServer(t, NewAdminServer(AdminConfig{
		Version: "v1.2.3-test",
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Status:  func(context.Context) (any, error) { return map[string]int{"follows": 7}, nil },
		Ready:   func(context.Context) error { return errors.New("jetstream not connected yet") },
	}))

	for _, tt := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/metrics", 200, "appview_test_total 0"},
		{"GET", "/status", 200, `{"follows":7}`},
		{"GET", "/xrpc/_health", 200, `{"version":"v1.2.3-test"}`},
		{"HEAD", "/xrpc/_health", 200, ""},
		{"GET", "/readyz", 503, "jetstream not connected yet"},
		{"HEAD", "/readyz", 503, ""},
		{"POST", "/metrics", 405, `"MethodNotAllowed"`},
		{"GET", getFeedURL + "?feed=following&actor=" + string(alice), 404, `"NotFound"`},
		{"GET", "/lexicons/" + testNamespace + ".getFeed.json", 404, `"NotFound"`},
		{"GET", "/nope", 404, `"NotFound"`},
	} {
		res := do(t, tt.method, base+tt.path)
		if res.Status != tt.status || !strings.Contains(string(res.Body), tt.body) {
			t.Errorf("%s %s: %d %s, want %d with %s", tt.method, tt.path, res.Status, res.Body, tt.status, tt.body)
		}
	}
}

// A public server built without Metrics and Status, as the daemon builds
// it beside an admin server, answers both as unknown paths.
func TestPublicServerWithoutOperatorEndpoints(t *testing.T) {
	base := serve(t, testConfig(newFakeReader()))
	for _, path := range []string{"/metrics", "/status"} {
		res := do(t, http.MethodGet, base+path)
		if res.Status != http.StatusNotFound {
			t.Fatalf("GET %s: status %d, body %s", path, res.Status, res.Body)
		}
		if env := decodeEnvelope(t, res.Body); env.Error != "NotFound" {
			t.Errorf("GET %s: error %q", path, env.Error)
		}
	}
}

// Shutdown of an admin server returns Serve with nil and closes its
// listener, as it does for the public server.
func TestAdminServerShutdownClosesTheListener(t *testing.T) {
	s := NewAdminServer(AdminConfig{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	if res := do(t, http.MethodGet, "http://"+l.Addr().String()+"/xrpc/_health"); res.Status != http.StatusOK {
		t.Fatalf("health: %d %s", res.Status, res.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve returned %v after Shutdown, want nil", err)
	}
	if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the admin listener still accepts connections after Shutdown")
	}
}
