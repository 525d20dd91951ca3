package main

import (
	"context"
	"github.com/atfeeds/appview/internal/syncbuf"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

func runCmd(t *testing.T, environ []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut syncbuf.Buffer
	err = run(context.Background(), args, environ, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestUsage(t *testing.T) {
	if _, _, err := runCmd(t, nil); err == nil || err.Error() != "missing command" {
		t.Errorf("no command: %v", err)
	}
	if _, _, err := runCmd(t, nil, "frobnicate"); err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %v", err)
	}
	out, _, err := runCmd(t, nil, "help")
	if err != nil || !strings.Contains(out, "appview health") || !strings.Contains(out, "APPVIEW_DATABASE_PATH") {
		t.Errorf("help: %v\n%s", err, out)
	}
}

func TestVersion(t *testing.T) {
	oldV, oldC := appview.Version, appview.Commit
	t.Cleanup(func() { appview.Version, appview.Commit = oldV, oldC })
	appview.Version, appview.Commit = "v1.2.3", "abcdef0"
	out, _, err := runCmd(t, nil, "version")
	if err != nil {
		t.Fatal(err)
	}
	want := "version: v1.2.3\ncommit: abcdef0\ngo: " + appview.GoVersion() + "\n"
	if out != want {
		t.Errorf("version printed %q, want %q", out, want)
	}
}

func TestConfigCommand(t *testing.T) {
	out, _, err := runCmd(t, []string{"APPVIEW_HTTP_LISTEN=127.0.0.1:9999", "APPVIEW_INGEST_BATCH_INTERVAL=250ms", "HOME=/x"}, "config")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"listen: 127.0.0.1:9999\n", "batch_interval: 250ms\n", "name: following\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("config output lacks %q:\n%s", want, out)
		}
	}
	// The output is a config file that gives the same config back.
	got, err := appview.ParseConfig(strings.NewReader(out))
	if err != nil {
		t.Fatalf("printed config does not parse: %v", err)
	}
	if got.HTTP.Listen != "127.0.0.1:9999" || got.Ingest.BatchInterval != 250*time.Millisecond {
		t.Errorf("parsed back: %+v", got)
	}

	_, _, err = runCmd(t, []string{"APPVIEW_HTTP_LISTNE=:1"}, "config")
	if err == nil || !strings.Contains(err.Error(), "APPVIEW_HTTP_LISTNE: unknown variable") {
		t.Errorf("unknown variable: %v", err)
	}

	out, _, err = runCmd(t, nil, "config", "--env")
	if err != nil || !strings.Contains(out, "APPVIEW_JETSTREAM_URLS\n") {
		t.Errorf("config --env: %v\n%s", err, out)
	}
}

func TestHealth(t *testing.T) {
	var status = http.StatusOK
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/xrpc/_health":
			w.WriteHeader(status)
			w.Write([]byte(`{"version":"dev"}`))
		case "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"not ready","reason":"jetstream: not connected yet"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	out, _, err := runCmd(t, nil, "health", "--url", srv.URL)
	if err != nil || out != "{\"version\":\"dev\"}\n" {
		t.Errorf("healthy: %v, printed %q", err, out)
	}
	_, _, err = runCmd(t, nil, "health", "--url", srv.URL, "--ready")
	if err == nil || !strings.Contains(err.Error(), "status 503") || !strings.Contains(err.Error(), "not connected yet") {
		t.Errorf("not ready: %v", err)
	}
	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	if _, _, err = runCmd(t, nil, "health", "--url", srv.URL); err == nil || !strings.Contains(err.Error(), "status 500") {
		t.Errorf("unhealthy: %v", err)
	}

	// Nothing listening: an error, quickly.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if _, _, err = runCmd(t, nil, "health", "--url", "http://"+addr, "--timeout", "2s"); err == nil {
		t.Error("nothing listening: no error")
	}
	// Without --url the address comes from the config.
	if _, _, err = runCmd(t, []string{"APPVIEW_HTTP_LISTEN=" + addr}, "health"); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("address from config: %v", err)
	}
}

// The image's HEALTHCHECK runs `appview health` with the container's
// environment and no --config. A daemon whose notify secret is in a
// mounted file it was given, with APPVIEW_NOTIFY_ENABLED=true in the
// environment, runs fine; the probe, which sees only the environment,
// used to fail validating the whole config (found by a review). It needs
// only http.listen.
func TestHealthNeedsOnlyTheListenAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"version":"dev"}`))
	}))
	defer srv.Close()
	env := []string{"APPVIEW_HTTP_LISTEN=" + srv.Listener.Addr().String(), "APPVIEW_NOTIFY_ENABLED=true"}
	if _, _, err := runCmd(t, env, "config"); err == nil {
		t.Fatal("setup: the environment alone should not be a valid config")
	}
	if out, _, err := runCmd(t, env, "health"); err != nil || !strings.Contains(out, "dev") {
		t.Errorf("health against a healthy daemon: %q %v", out, err)
	}
}

func TestProbeURL(t *testing.T) {
	for _, tc := range []struct{ listen, want, err string }{
		{":8080", "http://127.0.0.1:8080", ""},
		{"0.0.0.0:80", "http://127.0.0.1:80", ""},
		{"[::]:8080", "http://[::1]:8080", ""},
		{"10.1.2.3:8080", "http://10.1.2.3:8080", ""},
		{"localhost:8080", "http://localhost:8080", ""},
		{"127.0.0.1:0", "", "random port"},
		{"8080", "", "missing port"},
	} {
		got, err := probeURL(tc.listen)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("probeURL(%q) = %q, %v; want %q, error containing %q", tc.listen, got, err, tc.want, tc.err)
		}
	}
}

// serve runs the daemon from environment variables alone, logs its
// effective config, answers the health command, and stops cleanly when
// its context ends (what SIGTERM does in main).
func TestServe(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	addr := freeAddr(t)
	environ := []string{
		"APPVIEW_DATABASE_PATH=" + t.TempDir() + "/appview.db",
		"APPVIEW_JETSTREAM_URLS=" + js.URL(),
		"APPVIEW_HTTP_LISTEN=" + addr,
	}
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, environ, new(syncbuf.Buffer), &stderr) }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := runCmd(t, environ, "health", "--timeout", "1s")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not healthy after 10s: %v\n%s", err, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !js.WaitConnections(1, 10*time.Second) {
		t.Error("serve did not subscribe to the fake jetstream")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	logs := stderr.String()
	for _, want := range []string{`msg="effective config"`, "config.http.listen=" + addr, "config.jetstream.urls=" + js.URL(), `msg="appview stopped cleanly"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

func TestServeRejectsBadConfig(t *testing.T) {
	err := run(context.Background(), []string{"serve"}, []string{"APPVIEW_INGEST_BATCH_SIZE=0"}, new(syncbuf.Buffer), new(syncbuf.Buffer))
	if err == nil || !strings.Contains(err.Error(), "ingest.batch_size") {
		t.Errorf("serve with batch size 0: %v", err)
	}
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A signal that comes while serve opens the database (a long migration
// after an upgrade, a large file's caches loading) stops it cleanly: each
// migration is a transaction, rolled back and applied again at the next
// start, and nothing else was written. It was "appview: read journal
// mode: context canceled" and exit 1 (found by a review of the run loop).
func TestASignalWhileServeStartsIsACleanStop(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	environ := []string{
		"APPVIEW_DATABASE_PATH=" + t.TempDir() + "/appview.db",
		"APPVIEW_JETSTREAM_URLS=" + js.URL(),
		"APPVIEW_HTTP_LISTEN=" + freeAddr(t),
	}
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the signal, before the database is open
	if err := run(ctx, []string{"serve"}, environ, new(syncbuf.Buffer), &stderr); err != nil {
		t.Fatalf("serve stopped while starting: %v, want a clean stop\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "appview stopped before it started") {
		t.Errorf("serve did not say it stopped:\n%s", stderr.String())
	}
}
