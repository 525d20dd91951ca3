//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// The daemon's metrics as Prometheus itself sees them: promtool's linter
// passes on a scrape taken after real traffic, and a real Prometheus
// server scrapes the daemon, finds it up and its ingest counter moving.
func TestPrometheus(t *testing.T) {
	promtool := need(t, "promtool")
	prometheus := need(t, "prometheus")

	js := jetstreamtest.NewServer()
	defer js.Close()
	d := startAppview(t, js)
	appendTimeline(js, 3)
	waitFeed(t, d.base, alice, 3)

	t.Run("promtool check metrics", func(t *testing.T) {
		scrape := get(t, d.base+"/metrics")
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(scrape)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s", err, out)
		}
	})

	t.Run("scraped by prometheus", func(t *testing.T) {
		dir := t.TempDir()
		config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: appview
    static_configs:
      - targets: [%q]
`, strings.TrimPrefix(d.base, "http://"))
		configPath := filepath.Join(dir, "prometheus.yml")
		if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		addr := freeAddr(t)
		p := start(t, exec.Command(prometheus,
			"--config.file="+configPath,
			"--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr,
		))
		promBase := "http://" + addr
		waitStatus(t, p, promBase+"/-/ready", http.StatusOK, 60*time.Second)

		deadline := time.Now().Add(60 * time.Second)
		for {
			up, upErr := queryScalar(promBase, `up{job="appview"}`)
			events, evErr := queryScalar(promBase, `sum(appview_jetstream_events_received_total{job="appview"})`)
			if upErr == nil && evErr == nil && up == 1 && events > 0 {
				break
			}
			if p.exited() || time.Now().After(deadline) {
				t.Fatalf("after 60s: up = %v (%v), events received = %v (%v)", up, upErr, events, evErr)
			}
			time.Sleep(200 * time.Millisecond)
		}

		// Every dashboard query is valid PromQL to a real Prometheus.
		for _, expr := range dashboardQueries(t) {
			expr = strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*").Replace(expr)
			if err := queryOK(promBase, expr); err != nil {
				t.Errorf("dashboard query %s: %v", expr, err)
			}
		}
		if err := p.stop(t, syscall.SIGTERM, 30*time.Second); err != nil {
			t.Logf("prometheus exit: %v", err)
		}
	})
}

// queryScalar runs an instant query that must return one sample.
func queryScalar(base, query string) (float64, error) {
	resp, err := http.Get(base + "/api/v1/query?" + url.Values{"query": {query}}.Encode())
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", query, body.Error)
	}
	if len(body.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d samples, want 1", query, len(body.Data.Result))
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// queryOK runs an instant query and reports whether Prometheus accepted it.
func queryOK(base, query string) error {
	resp, err := http.Get(base + "/api/v1/query?" + url.Values{"query": {query}}.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s", body.Error)
	}
	return nil
}

// dashboardQueries returns the expr of every target in the Grafana
// dashboard, wherever panels nest.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(repoRoot, "deploy", "grafana", "appview.json"))), &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				out = append(out, e)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	if len(out) == 0 {
		t.Fatal("no queries in the dashboard")
	}
	return out
}
