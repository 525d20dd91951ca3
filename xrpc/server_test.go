package xrpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atfeeds/appview/feeds"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const (
	testNamespace = "com.example.appview"
	getFeedURL    = "/xrpc/" + testNamespace + ".getFeed"

	alice = syntax.DID("did:plc:alice000000000000000000a")
	bob   = syntax.DID("did:plc:bob00000000000000000000b")

	posts   = syntax.NSID("app.bsky.feed.post")
	reposts = syntax.NSID("app.bsky.feed.repost")
)

// testFilters are the fields "following" declares: posts filter on langs
// and createdAt, reposts on subject.
var testFilters = map[syntax.NSID][]feeds.Field{
	posts: {
		{Name: "langs", Path: "langs", Kind: feeds.FieldEquality},
		{Name: "createdAt", Path: "createdAt", Kind: feeds.FieldDatetime},
	},
	reposts: {{Name: "subject", Path: "subject.uri", Kind: feeds.FieldEquality}},
}

var testFeeds = []FeedSpec{
	{Name: "following", Collections: []syntax.NSID{posts, reposts}, Fields: testFilters},
	{Name: "mutuals", Collections: []syntax.NSID{posts}},
}

// fakeReader is an in-memory FeedReader. Items per (feed, viewer,
// collection) are kept newest first, as the store returns them.
type fakeReader struct {
	mu      sync.Mutex
	items   map[cursorScope][]feeds.Item
	err     error
	panics  bool
	queries []feeds.PageQuery
}

func newFakeReader() *fakeReader {
	return &fakeReader{items: make(map[cursorScope][]feeds.Item)}
}

func (f *fakeReader) add(sc cursorScope, items ...feeds.Item) {
	f.mu.Lock()
	defer f.mu.Unlock()
	all := append(f.items[sc], items...)
	slices.SortFunc(all, func(a, b feeds.Item) int { return -compareKeys(a.Key, b.Key) })
	f.items[sc] = all
}

func compareKeys(a, b feeds.PageKey) int {
	if a.SortUS != b.SortUS {
		if a.SortUS < b.SortUS {
			return -1
		}
		return 1
	}
	switch {
	case a.RecordID < b.RecordID:
		return -1
	case a.RecordID > b.RecordID:
		return 1
	}
	return 0
}

func (f *fakeReader) ReadFeed(ctx context.Context, q feeds.PageQuery) (feeds.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	if f.panics {
		panic("fake reader exploded")
	}
	if f.err != nil {
		return feeds.Page{}, f.err
	}
	var page feeds.Page
	for _, it := range f.items[cursorScope{Feed: q.Feed, Actor: q.Viewer, Collection: q.Collection}] {
		if q.Before != nil && compareKeys(it.Key, *q.Before) >= 0 {
			continue
		}
		if len(page.Items) == q.Limit {
			next := page.Items[len(page.Items)-1].Key
			page.Next = &next
			break
		}
		page.Items = append(page.Items, it)
	}
	return page, nil
}

func (f *fakeReader) lastQuery(t *testing.T) feeds.PageQuery {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queries) == 0 {
		t.Fatal("reader was not called")
	}
	return f.queries[len(f.queries)-1]
}

func (f *fakeReader) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeReader) setPanics(p bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.panics = p
}

func testConfig(r FeedReader) Config {
	return Config{
		Namespace: testNamespace,
		Feeds:     testFeeds,
		Reader:    r,
		Version:   "v1.2.3-test",
	}
}

// serve runs a Server on a loopback listener and returns its base URL. The
// cleanup shuts it down and checks that Serve returned nil.
func serve(t *testing.T, cfg Config) string {
	t.Helper()
	return serveServer(t, NewServer(cfg))
}

// serveServer is serve for a Server already built.
func serveServer(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after Shutdown, want nil", err)
		}
	})
	return "http://" + l.Addr().String()
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func do(t *testing.T, method, url string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: body}
}

// decodeEnvelope checks that body is exactly an XRPC error envelope.
func decodeEnvelope(t *testing.T, body []byte) envelope {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	var env envelope
	if err := dec.Decode(&env); err != nil {
		t.Fatalf("body %q is not an XRPC envelope: %v", body, err)
	}
	if env.Error == "" || env.Message == "" {
		t.Fatalf("envelope %q lacks error or message", body)
	}
	return env
}

func TestHealth(t *testing.T) {
	base := serve(t, testConfig(newFakeReader()))
	res := do(t, http.MethodGet, base+"/xrpc/_health")
	if res.Status != http.StatusOK {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	if got, want := string(res.Body), `{"version":"v1.2.3-test"}`+"\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
}

func TestRouting(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := testConfig(newFakeReader())
	cfg.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	base := serve(t, cfg)

	noMetrics := serve(t, testConfig(newFakeReader()))

	tests := []struct {
		name    string
		method  string
		url     string
		status  int
		errName string
	}{
		{"unknown xrpc method", "GET", base + "/xrpc/app.bsky.feed.getTimeline", 501, "MethodNotImplemented"},
		{"unknown method in our namespace", "GET", base + "/xrpc/" + testNamespace + ".getPosts", 501, "MethodNotImplemented"},
		{"getFeed with trailing slash", "GET", base + getFeedURL + "/", 501, "MethodNotImplemented"},
		{"empty xrpc method", "GET", base + "/xrpc/", 501, "MethodNotImplemented"},
		{"POST getFeed", "POST", base + getFeedURL + "?feed=following&actor=" + string(alice), 405, "MethodNotAllowed"},
		{"DELETE getFeed", "DELETE", base + getFeedURL, 405, "MethodNotAllowed"},
		{"POST health", "POST", base + "/xrpc/_health", 405, "MethodNotAllowed"},
		{"unknown path", "GET", base + "/nope", 404, "NotFound"},
		{"root", "GET", base + "/", 404, "NotFound"},
		{"xrpc without slash", "GET", base + "/xrpc", 404, "NotFound"},
		{"POST metrics", "POST", base + "/metrics", 405, "MethodNotAllowed"},
		{"metrics not configured", "GET", noMetrics + "/metrics", 404, "NotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := do(t, tt.method, tt.url)
			if res.Status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.Status, tt.status, res.Body)
			}
			if env := decodeEnvelope(t, res.Body); env.Error != tt.errName {
				t.Errorf("error %q, want %q", env.Error, tt.errName)
			}
			if tt.status == 405 && res.Header.Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}

	res := do(t, http.MethodGet, base+"/metrics")
	if res.Status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", res.Status)
	}
}

func TestReaderErrorIs500(t *testing.T) {
	r := newFakeReader()
	base := serve(t, testConfig(r))
	url := base + getFeedURL + "?feed=following&actor=" + string(alice)

	r.setErr(errors.New("database is on fire: SELECT secret FROM stuff"))
	res := do(t, http.MethodGet, url)
	if res.Status != http.StatusInternalServerError {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	env := decodeEnvelope(t, res.Body)
	if env.Error != "InternalServerError" || strings.Contains(string(res.Body), "fire") {
		t.Errorf("body %s", res.Body)
	}

	r.setErr(nil)
	r.setPanics(true)
	res = do(t, http.MethodGet, url)
	if res.Status != http.StatusInternalServerError {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	if env := decodeEnvelope(t, res.Body); env.Error != "InternalServerError" ||
		strings.Contains(string(res.Body), "goroutine") || strings.Contains(string(res.Body), "exploded") {
		t.Errorf("panic leaked into the body: %s", res.Body)
	}

	r.setPanics(false)
	if res := do(t, http.MethodGet, url); res.Status != http.StatusOK {
		t.Errorf("after a panic: status %d, body %s", res.Status, res.Body)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := newFakeReader()
	cfg := testConfig(r)
	cfg.Registerer = reg
	cfg.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	base := serve(t, cfg)

	do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice))
	do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice))
	do(t, http.MethodGet, base+getFeedURL+"?feed=nope&actor="+string(alice))
	do(t, http.MethodGet, base+"/xrpc/_health")
	do(t, http.MethodGet, base+"/xrpc/did:plc:should-not-be-a-label")
	r.setPanics(true)
	do(t, http.MethodGet, base+getFeedURL+"?feed=following&actor="+string(alice))

	body := string(do(t, http.MethodGet, base+"/metrics").Body)
	for _, want := range []string{
		`appview_xrpc_requests_total{method="getFeed",status="200"} 2`,
		`appview_xrpc_requests_total{method="getFeed",status="400"} 1`,
		`appview_xrpc_requests_total{method="getFeed",status="500"} 1`,
		`appview_xrpc_requests_total{method="_health",status="200"} 1`,
		`appview_xrpc_requests_total{method="other",status="501"} 1`,
		`appview_xrpc_request_duration_seconds_count{method="getFeed"} 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, "should-not-be-a-label") {
		t.Error("a path became a label")
	}

	// A second server on the same registry shares the collectors.
	NewServer(cfg)
}

func TestValidate(t *testing.T) {
	r := newFakeReader()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"ok", func(*Config) {}, ""},
		{"empty namespace", func(c *Config) { c.Namespace = "" }, "namespace"},
		{"bad namespace", func(c *Config) { c.Namespace = "not a namespace" }, "namespace"},
		{"no reader", func(c *Config) { c.Reader = nil }, "reader"},
		{"no feeds is valid", func(c *Config) { c.Feeds = nil }, ""},
		{"empty name", func(c *Config) { c.Feeds = []FeedSpec{{Collections: []syntax.NSID{posts}}} }, "feeds[0].name"},
		{"duplicate", func(c *Config) { c.Feeds = append(slices.Clone(testFeeds), testFeeds[0]) }, "feeds[2].name"},
		{"no collections", func(c *Config) { c.Feeds = []FeedSpec{{Name: "x"}} }, "feeds[0].collections"},
		{"bad collection", func(c *Config) {
			c.Feeds = []FeedSpec{{Name: "x", Collections: []syntax.NSID{"nope"}}}
		}, "feeds[0].collections[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(r)
			tt.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Fatalf("error %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestServeAfterShutdown(t *testing.T) {
	s := NewServer(testConfig(newFakeReader()))
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := s.Serve(l); err != nil {
		t.Errorf("Serve after Shutdown: %v, want nil", err)
	}
}
