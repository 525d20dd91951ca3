package appview

import (
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// With http.admin_listen set, /metrics and /status answer on the admin
// address and are unknown paths (404 envelopes) on the public one, which
// still serves getFeed; the probes answer on both; a stop closes both
// listeners.
func TestAdminListenServesOperatorEndpoints(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	cfg.HTTP.AdminListen = "127.0.0.1:0"
	td := startDaemon(t, js, cfg)
	if td.AdminAddr() == nil {
		t.Fatal("AdminAddr is nil with http.admin_listen set")
	}
	admin := "http://" + td.AdminAddr().String()

	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1),
		jetstreamtest.Post(user("carol"), "p1", t0+2, "one"),
	)
	td.waitCursor(t, t0+2)
	if got, want := td.feed(t, user("alice")), []string{"p1"}; !slices.Equal(got, want) {
		t.Errorf("getFeed on the public address: %v, want %v", got, want)
	}

	for _, tt := range []struct {
		url    string
		status int
		body   string
	}{
		{admin + "/metrics", 200, `appview_ingest_changes_total{outcome="applied"} 2`},
		{admin + "/status", 200, `"jetstream":`},
		{admin + "/xrpc/_health", 200, `"version":`},
		{td.base + "/xrpc/_health", 200, `"version":`},
		{td.base + "/metrics", 404, `"error":"NotFound"`},
		{td.base + "/status", 404, `"error":"NotFound"`},
	} {
		res, err := httpGet(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if res.status != tt.status || !strings.Contains(res.body, tt.body) {
			t.Errorf("GET %s: %d %.300s, want %d with %s", tt.url, res.status, res.body, tt.status, tt.body)
		}
	}
	// Readiness may still be settling; it must be answered, not a 404.
	for _, base := range []string{admin, td.base} {
		if res, err := httpGet(base + "/readyz"); err != nil || (res.status != 200 && res.status != 503) {
			t.Errorf("GET %s/readyz: %v %v", base, res, err)
		}
	}

	td.stop()
	for _, addr := range []string{td.Addr().String(), td.AdminAddr().String()} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after the daemon stopped", addr)
		}
	}
}

// Off (the default), the daemon has no admin address and the public one
// serves /metrics and /status as before.
func TestAdminListenOffKeepsOperatorEndpointsPublic(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	td := startDaemon(t, js, testConfig(t, js, t.TempDir()+"/appview.db"))
	if td.AdminAddr() != nil {
		t.Errorf("AdminAddr = %v with http.admin_listen off", td.AdminAddr())
	}
	for _, path := range []string{"/metrics", "/status"} {
		if res, err := httpGet(td.base + path); err != nil || res.status != http.StatusOK {
			t.Errorf("GET %s: %v %v", path, res.status, err)
		}
	}
}

// An admin address that cannot be listened on fails the start, naming the
// key, and leaves the database free for the next start.
func TestAdminListenBusyFailsBuild(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	cfg.HTTP.AdminListen = busy.Addr().String()
	_, err = Build(t.Context(), cfg, Options{Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "http.admin_listen") {
		t.Fatalf("build with a busy admin address: %v", err)
	}
	cfg.HTTP.AdminListen = ""
	td := startDaemon(t, js, cfg)
	td.stop()
}
