package appview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

const (
	followNSID = "app.bsky.graph.follow"
	postNSID   = "app.bsky.feed.post"
	t0         = int64(1_795_975_616_000_000) // a plausible time_us
)

// testDaemon is a daemon running against a fake Jetstream on loopback.
type testDaemon struct {
	*Daemon
	base string
	stop func()
}

func testConfig(t *testing.T, js *jetstreamtest.Server, dbPath string) Config {
	cfg := DefaultConfig()
	cfg.Database.Path = dbPath
	cfg.Jetstream.URLs = []string{js.URL()}
	cfg.Ingest.BatchInterval = 5 * time.Millisecond
	cfg.Ingest.IndexAll = true // these tests exercise the core path: every follower is a viewer
	cfg.HTTP.Listen = "127.0.0.1:0"
	return cfg
}

func startDaemon(t *testing.T, js *jetstreamtest.Server, cfg Config) *testDaemon {
	t.Helper()
	subscribed := len(js.Queries())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Build(context.Background(), cfg, Options{Listener: l, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	td := &testDaemon{Daemon: d, base: "http://" + l.Addr().String()}
	// Jetstream without a cursor starts at the live tip: wait until the
	// daemon is subscribed before a test appends frames.
	if !js.WaitConnections(subscribed+1, 10*time.Second) {
		t.Fatal("daemon did not subscribe within 10s")
	}
	stopped := false
	td.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("daemon did not stop within 10s")
		}
		if err := d.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	t.Cleanup(td.stop)
	return td
}

// waitCursor polls until the committed cursor reaches timeUS.
func (td *testDaemon) waitCursor(t *testing.T, timeUS int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for td.Store().Cursor().TimeUS < timeUS {
		if time.Now().After(deadline) {
			t.Fatalf("cursor stuck at %d, want %d", td.Store().Cursor().TimeUS, timeUS)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type feedResponse struct {
	Records []struct {
		URI        string          `json:"uri"`
		CID        string          `json:"cid"`
		DID        string          `json:"did"`
		Collection string          `json:"collection"`
		RKey       string          `json:"rkey"`
		TimeUS     int64           `json:"time_us"`
		Value      json.RawMessage `json:"value"`
	} `json:"records"`
	Cursor string `json:"cursor"`
}

// feed reads an actor's whole feed over HTTP and returns its record keys.
func (td *testDaemon) feed(t *testing.T, actor string) []string {
	t.Helper()
	var out []string
	cursor := ""
	for {
		q := url.Values{"feed": {"following"}, "actor": {actor}, "limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page feedResponse
		td.getJSON(t, "/xrpc/com.example.appview.getFeed?"+q.Encode(), &page)
		for _, r := range page.Records {
			out = append(out, r.RKey)
		}
		if page.Cursor == "" {
			return out
		}
		cursor = page.Cursor
	}
}

func (td *testDaemon) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(td.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

func (td *testDaemon) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(td.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	return string(body)
}

func user(name string) string { return "did:plc:" + name }

func TestDaemonEndToEnd(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	td := startDaemon(t, js, testConfig(t, js, t.TempDir()+"/appview.db"))

	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1),
		jetstreamtest.Follow(followNSID, user("bob"), "f2", user("carol"), t0+2),
		jetstreamtest.Follow(followNSID, user("alice"), "f3", user("dave"), t0+3),
		jetstreamtest.Follow(followNSID, user("alice"), "f4", user("dave"), t0+4), // a second follow of dave
		jetstreamtest.Post(user("carol"), "p1", t0+10, "one"),
		[]byte(`{"did":"did:plc:carol","time_us":`+fmt.Sprint(t0+11)+`,"kind":"commit","commit":{`), // truncated junk
		jetstreamtest.Post(user("dave"), "p2", t0+12, "two"),
		jetstreamtest.Post(user("carol"), "p3", t0+13, "three"),
		jetstreamtest.Post(user("erin"), "p4", t0+14, "nobody follows erin"),
	)
	td.waitCursor(t, t0+14)
	if got, want := td.feed(t, user("alice")), []string{"p3", "p2", "p1"}; !slices.Equal(got, want) {
		t.Errorf("alice = %v, want %v", got, want)
	}
	if got, want := td.feed(t, user("bob")), []string{"p3", "p1"}; !slices.Equal(got, want) {
		t.Errorf("bob = %v, want %v", got, want)
	}

	js.Append(
		jetstreamtest.Delete(postNSID, user("carol"), "p1", t0+20),
		jetstreamtest.Delete(followNSID, user("bob"), "f2", t0+21),   // bob unfollows carol
		jetstreamtest.Delete(followNSID, user("alice"), "f3", t0+22), // alice still follows dave through f4
	)
	td.waitCursor(t, t0+22)
	if got, want := td.feed(t, user("alice")), []string{"p3", "p2"}; !slices.Equal(got, want) {
		t.Errorf("alice after deletes = %v, want %v", got, want)
	}
	if got := td.feed(t, user("bob")); len(got) != 0 {
		t.Errorf("bob after unfollow = %v, want empty", got)
	}

	m := td.metrics(t)
	for _, want := range []string{
		`appview_jetstream_events_dropped_total{reason="bad_json"} 1`,
		`appview_ingest_changes_total{outcome="applied"} 11`,
		`appview_feed_rows_total{operation="fanout"} 5`,
		// Counters of things that have not happened are shown at 0.
		`appview_profile_fields_dropped_total{field="displayName"} 0`,
		`appview_viewer_last_read_writes_total{result="queue_full"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	var health struct{ Version string }
	td.getJSON(t, "/xrpc/_health", &health)
	if health.Version != Version {
		t.Errorf("health version = %q", health.Version)
	}
}

// script is a stream with follows, unfollows, posts and deletes among
// twenty accounts, and replays of its own frames.
func script() [][]byte {
	var out [][]byte
	ts := t0
	next := func() int64 { ts += 1000; return ts }
	for i := range 20 {
		for j := 1; j <= 4; j++ {
			out = append(out, jetstreamtest.Follow(followNSID, user(fmt.Sprint("u", i)), fmt.Sprint("f", j), user(fmt.Sprint("u", (i+j*3)%20)), next()))
		}
	}
	for k := range 120 {
		author := user(fmt.Sprint("u", k%20))
		out = append(out, jetstreamtest.Post(author, fmt.Sprint("p", k), next(), "hello"))
		if k%7 == 3 {
			out = append(out, jetstreamtest.Delete(postNSID, author, fmt.Sprint("p", k-1), next()))
		}
		if k%11 == 5 {
			out = append(out, jetstreamtest.Delete(followNSID, user(fmt.Sprint("u", k%20)), "f2", next()))
		}
		if k%13 == 0 && k > 0 {
			out = append(out, out[len(out)-5]) // a duplicate delivery
		}
	}
	return out
}

func lastTime(frames [][]byte) int64 {
	var last int64
	for _, f := range frames {
		var h struct {
			TimeUS int64 `json:"time_us"`
		}
		json.Unmarshal(f, &h)
		last = max(last, h.TimeUS)
	}
	return last
}

func allFeeds(t *testing.T, td *testDaemon) map[string][]string {
	out := map[string][]string{}
	for i := range 20 {
		out[fmt.Sprint("u", i)] = td.feed(t, user(fmt.Sprint("u", i)))
	}
	return out
}

func TestReconnectReplayMatchesUninterruptedRun(t *testing.T) {
	frames := script()

	clean := jetstreamtest.NewServer()
	defer clean.Close()
	ref := startDaemon(t, clean, testConfig(t, clean, t.TempDir()+"/ref.db"))
	clean.Append(frames...)
	ref.waitCursor(t, lastTime(frames))
	want := allFeeds(t, ref)

	flaky := jetstreamtest.NewServer()
	defer flaky.Close()
	flaky.DropEvery(37)
	cfg := testConfig(t, flaky, t.TempDir()+"/flaky.db")
	cfg.Jetstream.Rewind = 3 * time.Millisecond // 3 frames of this script
	td := startDaemon(t, flaky, cfg)
	flaky.Append(frames...)
	td.waitCursor(t, lastTime(frames))
	if got := allFeeds(t, td); !equalFeeds(got, want) {
		t.Errorf("feeds after reconnects differ from the uninterrupted run:\n got %v\nwant %v", got, want)
	}
	queries := flaky.Queries()
	if len(queries) < 5 {
		t.Fatalf("only %d connections; the drops did not happen", len(queries))
	}
	for i, q := range queries[1:] {
		c := q.Get("cursor")
		if c == "" {
			t.Fatalf("reconnect %d sent no cursor", i+1)
		}
	}
	if total := len(frames); total < 200 {
		t.Fatalf("script too short: %d", total)
	}
}

func equalFeeds(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestRestartResumesFromStoredCursor(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	path := t.TempDir() + "/appview.db"
	cfg := testConfig(t, js, path)

	first := startDaemon(t, js, cfg)
	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1_000_000),
		jetstreamtest.Post(user("carol"), "p1", t0+2_000_000, "before restart"),
	)
	first.waitCursor(t, t0+2_000_000)
	first.stop()
	if q := js.Queries()[0]; q.Has("cursor") {
		t.Errorf("first start sent cursor %q on an empty database", q.Get("cursor"))
	}

	js.Append(jetstreamtest.Post(user("carol"), "p2", t0+30_000_000, "while down"))
	second := startDaemon(t, js, cfg)
	second.waitCursor(t, t0+30_000_000)
	queries := js.Queries()
	got := queries[len(queries)-1].Get("cursor")
	if want := fmt.Sprint(t0 + 2_000_000 - cfg.Jetstream.Rewind.Microseconds()); got != want {
		t.Errorf("resumed with cursor %s, want the stored time_us minus the rewind %s", got, want)
	}
	if got, want := second.feed(t, user("alice")), []string{"p2", "p1"}; !slices.Equal(got, want) {
		t.Errorf("alice after restart = %v, want %v", got, want)
	}
	for _, want := range []string{"wantedCollections"} {
		if !queries[0].Has(want) {
			t.Errorf("subscribe query lacks %s: %v", want, queries[0])
		}
	}
}

// testLogger sends the daemon's logs to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestShutdownCommitsThePendingBatch stops the daemon while a batch is
// still open (the flush interval is an hour away) and checks that the
// events and their cursor were committed on the way out.
func TestShutdownCommitsThePendingBatch(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	path := t.TempDir() + "/appview.db"
	cfg := testConfig(t, js, path)
	cfg.Ingest.BatchInterval = time.Hour
	td := startDaemon(t, js, cfg)
	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1),
		jetstreamtest.Post(user("carol"), "p1", t0+2, "pending"),
	)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(td.metrics(t), `appview_jetstream_events_received_total{collection="app.bsky.feed.post",kind="commit",operation="create"} 1`) {
		if time.Now().After(deadline) {
			t.Fatal("events never reached the daemon")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c := td.Store().Cursor(); c.TimeUS != 0 {
		t.Fatalf("batch committed before shutdown (cursor %d); the test needs it pending", c.TimeUS)
	}
	td.stop()

	after := startDaemon(t, js, cfg)
	if got := after.Store().Cursor().TimeUS; got != t0+2 {
		t.Errorf("cursor after restart = %d, want %d", got, t0+2)
	}
	if got, want := after.feed(t, user("alice")), []string{"p1"}; !slices.Equal(got, want) {
		t.Errorf("alice = %v, want %v", got, want)
	}
}

type response struct {
	status int
	body   string
}

func httpGet(url string) (response, error) {
	resp, err := http.Get(url)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(body)}, err
}

// TestCursorResetWhileRunning: an operator resets the Jetstream cursor
// while the daemon runs; the daemon adopts it at its next commit and
// reconnects from the reset position instead of writing over it.
func TestCursorResetWhileRunning(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	td := startDaemon(t, js, cfg)
	js.Append(jetstreamtest.Post(user("carol"), "p1", t0+60_000_000, "one"))
	td.waitCursor(t, t0+60_000_000)

	resetTo := time.UnixMicro(t0 + 10_000_000)
	before := len(js.Queries())
	resetStreamCursor(t, cfg, resetTo)
	js.Append(jetstreamtest.Post(user("carol"), "p2", t0+61_000_000, "two"))
	checkReconnectedFrom(t, js, cfg, before, resetTo)
	td.waitCursor(t, t0+61_000_000)
}

// resetStreamCursor resets the stream cursor to `to` as the operator's
// command does, from another store on the file.
func resetStreamCursor(t *testing.T, cfg Config, to time.Time) {
	t.Helper()
	tool, err := OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close()
	if _, err := tool.ResetJetstream(context.Background(), to, "ops", time.Now()); err != nil {
		t.Fatal(err)
	}
}

// checkReconnectedFrom waits for the consumer's first connection after
// the before-th and checks it asked for the reset position less the
// rewind.
func checkReconnectedFrom(t *testing.T, js *jetstreamtest.Server, cfg Config, before int, resetTo time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(js.Queries()) == before {
		if time.Now().After(deadline) {
			t.Fatal("daemon did not reconnect after the reset")
		}
		time.Sleep(5 * time.Millisecond)
	}
	q := js.Queries()[before]
	if want := fmt.Sprint(resetTo.UnixMicro() - cfg.Jetstream.Rewind.Microseconds()); q.Get("cursor") != want {
		t.Errorf("reconnected with cursor %s, want the reset position minus the rewind %s", q.Get("cursor"), want)
	}
}

// TestCursorResetOnASilentStream: a reset made while no event arrives is
// adopted at an idle tick, not at the next batch: the cursor the daemon
// reports (/status, the lag gauge) is the reset's, and the consumer
// reconnects from it without waiting for an event. The reset moves the
// cursor past the stream's one event by more than the rewind, so the
// reconnect replays nothing: a reset back before it had the replay move
// the cursor on again within milliseconds, and the check of the adopted
// cursor raced that batch.
func TestCursorResetOnASilentStream(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	cfg.Sweep.IdleInterval = 20 * time.Millisecond
	td := startDaemon(t, js, cfg)
	js.Append(jetstreamtest.Post(user("carol"), "p1", t0+60_000_000, "one"))
	td.waitCursor(t, t0+60_000_000)

	resetTo := time.UnixMicro(t0 + 70_000_000)
	if rewind := cfg.Jetstream.Rewind; resetTo.Add(-rewind).UnixMicro() <= t0+60_000_000 {
		t.Fatalf("setup: a rewind of %v replays the event before the reset position", rewind)
	}
	before := len(js.Queries())
	resetStreamCursor(t, cfg, resetTo)
	checkReconnectedFrom(t, js, cfg, before, resetTo)
	if got := td.Store().Cursor().TimeUS; got != resetTo.UnixMicro() {
		t.Errorf("cursor = %d, want the reset position %d", got, resetTo.UnixMicro())
	}
	// The stream goes on from there under the reset's generation.
	js.Append(jetstreamtest.Post(user("carol"), "p2", t0+71_000_000, "two"))
	td.waitCursor(t, t0+71_000_000)
}

// TestStaleCursorIsRecordedAsAGap: a database whose cursor is older than
// Jetstream's retention window records a gap at connect and marks its
// viewers for a rebuild at their next read.
func TestStaleCursorIsRecordedAsAGap(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	cfg.Ingest.IndexAll = false
	stale := time.Now().Add(-40 * time.Hour).UnixMicro()
	st, _, err := OpenOrCreateStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st.RegisterViewer(ctx, syntax.DID(user("alice")), "following", time.Now())
	st.ClaimFirstRead(ctx, syntax.DID(user("alice")), "following", "x", time.Now(), time.Minute)
	if _, err := st.CompleteFirstRead(ctx, syntax.DID(user("alice")), "following", "x", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyBatch(ctx, &feeds.Batch{Cursor: feeds.StreamCursor{TimeUS: stale}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	td := startDaemon(t, js, cfg)
	if !strings.Contains(td.metrics(t), "appview_jetstream_gaps_total 1") {
		t.Error("gap not counted")
	}
	g, ok, err := td.Store().LastGap(ctx)
	if err != nil || !ok || g.CursorUS != stale || g.Size < 3*time.Hour {
		t.Fatalf("last gap %+v %v %v", g, ok, err)
	}
	if vs, _ := td.Store().RegisterViewer(ctx, syntax.DID(user("alice")), "following", time.Now()); vs.Complete {
		t.Error("viewer not marked for a rebuild")
	}
}

// TestJetstreamSessionsAreSyncRuns: every connection that ends is kept in
// sync_runs with its host, cursors and counts.
func TestJetstreamSessionsAreSyncRuns(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	js.DropEvery(2)
	td := startDaemon(t, js, testConfig(t, js, t.TempDir()+"/appview.db"))
	js.Append(
		jetstreamtest.Post(user("carol"), "p1", t0+1, "one"),
		jetstreamtest.Post(user("carol"), "p2", t0+2, "two"),
	)
	td.waitCursor(t, t0+2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		runs, err := td.Store().RecentSyncRuns(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Kind == "jetstream" && r.Subject == js.URL() && r.Written == 2 && r.EndCursor == t0+2 && r.Error != "" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no jetstream session recorded: %+v", runs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// In index_all mode no first read rebuilds a viewer, so a feed added to
// the config later is rebuilt by the daemon from what is stored, in the
// background after it starts: its readers get the backlog, not only what
// arrives from then on (found by a review).
func TestAFeedAddedLaterInIndexAllIsRebuiltByTheDaemon(t *testing.T) {
	js := jetstreamtest.NewServer()
	defer js.Close()
	path := t.TempDir() + "/appview.db"
	cfg := testConfig(t, js, path)
	first := startDaemon(t, js, cfg)
	js.Append(
		jetstreamtest.Follow(followNSID, user("alice"), "f1", user("carol"), t0+1),
		jetstreamtest.Post(user("carol"), "p1", t0+2, "before the feed was added"),
	)
	first.waitCursor(t, t0+2)
	first.stop()

	added := cfg.Feeds[0]
	added.Name = "also"
	cfg.Feeds = append(cfg.Feeds, added)
	second := startDaemon(t, js, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var page feedResponse
		second.getJSON(t, "/xrpc/com.example.appview.getFeed?feed=also&actor="+user("alice"), &page)
		if len(page.Records) == 1 && page.Records[0].RKey == "p1" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("feed also = %+v, want the stored p1", page.Records)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A daemon built and closed without running frees the ports it bound,
// public and admin, and closes a listener it was given: Run's servers
// close them when it stops, but before, a caller that gave up after
// Build (or a test) left them bound until the process exited.
func TestCloseWithoutRunFreesListeners(t *testing.T) {
	js := jetstreamtest.NewServer()
	t.Cleanup(js.Close)
	cfg := testConfig(t, js, t.TempDir()+"/appview.db")
	cfg.HTTP.AdminListen = "127.0.0.1:0"
	d, err := Build(t.Context(), cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	addrs := []string{d.Addr().String(), d.AdminAddr().String()}
	if err := d.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, addr := range addrs {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen on %s after Close without Run: %v", addr, err)
			continue
		}
		l.Close()
	}

	given, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err = Build(t.Context(), cfg, Options{Listener: given, Logger: testLogger(t)})
	if err != nil {
		given.Close()
		t.Fatalf("build with a listener: %v", err)
	}
	// A deadline, so that a listener left open fails the test rather than
	// hanging it.
	if err := given.(*net.TCPListener).SetDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := given.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept on the given listener after Close: %v, want %v", err, net.ErrClosed)
	}
}
