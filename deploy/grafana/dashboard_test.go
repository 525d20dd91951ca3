// Package grafana holds the Grafana dashboard for the daemon's metrics;
// its test keeps the dashboard's queries in step with what the daemon
// exports.
package grafana

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // collapsed rows nest theirs
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("appview.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("appview.json: %v", err)
	}
	return d
}

// queries returns every PromQL expression of the dashboard: panel targets
// and query variables.
func (d dashboard) queries() []string {
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			out = append(out, q.Query)
		}
	}
	return out
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	metricName = regexp.MustCompile(`\b(?:appview|go|process)_[a-zA-Z0-9_:]+`)
)

// metricNames extracts the metric names a PromQL expression reads. Label
// values (quoted) are dropped first; our metrics, the Go collector's and
// the process collector's are recognised by prefix.
func metricNames(expr string) []string {
	return metricName.FindAllString(quoted.ReplaceAllString(expr, `""`), -1)
}

func TestMetricNamesExtraction(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (le) (rate(appview_ingest_batch_seconds_bucket{instance=~"go_fake_x"}[$__rate_interval]))) / go_goroutines`)
	want := []string{"appview_ingest_batch_seconds_bucket", "go_goroutines"}
	if !slices.Equal(got, want) {
		t.Errorf("metricNames = %v, want %v", got, want)
	}
}

// The dashboard is well formed: titled panels with positions, every query
// panel on the datasource variable, every target with an expression.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q", d.Title, d.UID)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d %q: missing title or bad gridPos %+v", p.ID, p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource is not ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || len(metricNames(tg.Expr)) == 0 {
				t.Errorf("panel %q: target %+v reads no metric", p.Title, tg)
			}
		}
	}
}

// Every metric the dashboard queries exists in a scrape of a daemon that
// has ingested and served something, so a renamed metric fails here and
// not in front of an operator.
func TestDashboardMetricsExist(t *testing.T) {
	exported := scrapeBusyDaemon(t)
	used := map[string]bool{}
	for _, q := range loadDashboard(t).queries() {
		for _, name := range metricNames(q) {
			used[name] = true
		}
	}
	if len(used) < 10 {
		t.Fatalf("only %d metric names found in the dashboard: %v", len(used), used)
	}
	for _, name := range slices.Sorted(maps.Keys(used)) {
		if !exported[name] {
			t.Errorf("dashboard queries %s, which the daemon does not export", name)
		}
	}
	if t.Failed() {
		t.Logf("exported: %v", slices.Sorted(maps.Keys(exported)))
	}
}

// scrapeBusyDaemon runs the daemon in-process against a fake Jetstream,
// ingests a follow and posts, reads a feed, and returns the sample names
// of a scrape (histograms appear as their _bucket, _sum and _count).
func scrapeBusyDaemon(t *testing.T) map[string]bool {
	t.Helper()
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := appview.DefaultConfig()
	cfg.Database.Path = t.TempDir() + "/appview.db"
	cfg.Jetstream.URLs = []string{js.URL()}
	cfg.Ingest.BatchInterval = 5 * time.Millisecond
	// Every account with stored follows is a viewer: the scripted follow
	// makes alice's feed, with no first read from a PDS.
	cfg.Ingest.IndexAll = true
	// Nothing leaves the machine: identity lookups, where this build has
	// them, go to a closed loopback port and are refused as private.
	var offline []string
	for _, name := range appview.EnvNames() {
		switch name {
		case "APPVIEW_IDENTITY_PLC_URL":
			offline = append(offline, name+"=http://127.0.0.1:9")
		case "APPVIEW_IDENTITY_ALLOW_PRIVATE_NETWORKS":
			offline = append(offline, name+"=false")
		}
	}
	if _, err := appview.ApplyEnv(&cfg, offline); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := appview.Build(context.Background(), cfg, appview.Options{Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if err := d.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if !js.WaitConnections(1, 10*time.Second) {
		t.Fatal("daemon did not subscribe")
	}

	const alice, bob = "did:plc:alice000000000000000000a", "did:plc:bob00000000000000000000b"
	t0 := time.Now().UnixMicro()
	js.Append(jetstreamtest.Follow("app.bsky.graph.follow", alice, "3laaaaaaaaaa2", bob, t0))
	js.Append(jetstreamtest.Post(bob, "3lbbbbbbbbbb2", t0+1000, "hello"))
	base := "http://" + l.Addr().String()
	feedURL := base + "/xrpc/com.example.appview.getFeed?feed=following&actor=" + alice
	deadline := time.Now().Add(10 * time.Second)
	for {
		body := httpGet(t, feedURL)
		if strings.Contains(body, "3lbbbbbbbbbb2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("post not in the feed after 10s: %s", body)
		}
		time.Sleep(5 * time.Millisecond)
	}

	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(httpGet(t, base+"/metrics")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	return names
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return string(body)
}
