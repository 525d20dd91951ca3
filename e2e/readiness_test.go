//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Liveness and readiness part ways while Jetstream is unreachable: the
// process is alive (/xrpc/_health 200, `appview health` exits 0) but not
// ready (/readyz 503 with its reason, `appview health --ready` exits 1).
// The other e2e tests see /readyz turn 200 once the consumer connects.
func TestNotReadyWithoutJetstream(t *testing.T) {
	bin := binary(t)
	addr := freeAddr(t)
	env := cleanEnv(append(offlineEnv(t, bin),
		"APPVIEW_JETSTREAM_URLS=ws://"+freeAddr(t)+"/subscribe", // nothing listens there
		"APPVIEW_HTTP_LISTEN="+addr,
	)...)
	cmd := exec.Command(bin, "serve")
	cmd.Dir, cmd.Env = t.TempDir(), env
	p := start(t, cmd)
	base := "http://" + addr
	waitStatus(t, p, base+"/xrpc/_health", http.StatusOK, 30*time.Second)

	body := waitStatus(t, p, base+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
	var r struct{ Status, Reason string }
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "not ready" || !strings.Contains(r.Reason, "jetstream") {
		t.Errorf("/readyz body %s", body)
	}

	probe := func(args ...string) error {
		c := exec.Command(bin, append([]string{"health"}, args...)...)
		c.Env = env
		return c.Run()
	}
	if err := probe(); err != nil {
		t.Errorf("appview health (liveness): %v, want exit 0", err)
	}
	if err := probe("--ready"); err == nil {
		t.Error("appview health --ready exits 0 while Jetstream is unreachable")
	}
	if err := p.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
