package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/google/pprof/profile"

	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/workload"
	"github.com/atfeeds/appview/workload/replay"
)

// TestIngestPhase runs a tiny ingest phase end to end: generation, the
// fake Jetstream, the real daemon, the tenths, the metrics and dbstat.
func TestIngestPhase(t *testing.T) {
	o := options{
		accounts: 400, viewers: 40, follows: 10, events: 2000, seed: 1,
		phase: "ingest", dir: t.TempDir(), logLevel: "error", batchSize: 100,
	}
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	report := out.String()
	for _, want := range []string{"seed graph:", "overall:", "fan-out:", "bytes per feed item", "feed_items "} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "fan-out: 0 rows") || strings.Contains(report, "WARNING") {
		t.Errorf("report:\n%s", report)
	}
}

// TestRegisteredViewers: -registered-viewers runs the daemon with
// index_all off, every viewer registered and complete before the seed
// graph, so their follows are stored and the fan-out reaches them. The
// write probe registers new viewers meanwhile and times them; the
// first-read probe reads new viewers' first pages, two clients at once.
func TestRegisteredViewers(t *testing.T) {
	// getFeed waits for a probed first read as long as it takes, here:
	// under the race detector, beside other packages' tests on two cores,
	// one took 3.2 s, past the default first_read_wait of 3 s, and its
	// page was served before its last followees were in.
	t.Setenv("APPVIEW_BACKFILL_FIRST_READ_WAIT", "60s")
	o := options{
		accounts: 400, viewers: 40, follows: 10, events: 2000, seed: 1, registered: true,
		phase: "ingest", dir: t.TempDir(), logLevel: "error", batchSize: 100, writeProbe: time.Millisecond,
		firstReadProbe: time.Millisecond, firstReadClients: 2,
	}
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	report := out.String()
	if !strings.Contains(report, `registered 40 viewers of "following"`) || !strings.Contains(report, "overall:") {
		t.Errorf("report:\n%s", report)
	}
	if strings.Contains(report, "fan-out: 0 rows") || strings.Contains(report, "WARNING") {
		t.Errorf("no fan-out reached the registered viewers:\n%s", report)
	}
	if !regexp.MustCompile(`write probe: [1-9][0-9]* new viewers registered .* p50 [0-9.]+ ms`).MatchString(report) {
		t.Errorf("no write probe measured:\n%s", report)
	}
	// Every probe viewer's first read lists 50 followees with 5 posts each
	// from the loopback PDS, and getFeed waits for it: its first page of
	// 50 holds their 50 newest posts.
	m := regexp.MustCompile(`first-read probe: ([1-9][0-9]*) new viewers .*: (\d+) complete .*, (\d+) full; answered in p50 [0-9.]+ ms`).FindStringSubmatch(report)
	if m == nil || m[1] != m[2] || m[1] != m[3] || !strings.Contains(report, "(first_read_wait 1m0s)") {
		t.Errorf("first-read probe: want every first page read, complete and full:\n%s", report)
	}
	// Two probe clients, from one address: the admission lets both in.
	if !strings.Contains(report, "first-read probe: 2 client(s), one every 1ms each; backfill.admission.client_interval lowered to 1ms") {
		t.Errorf("first-read probe: want two clients and the admission's pace lowered:\n%s", report)
	}
	// The probes' writes are a request's, and were timed.
	if !regexp.MustCompile(`request writes beside the ingester's: [1-9][0-9]*, waiting [0-9]+ ms`).MatchString(report) {
		t.Errorf("no request write's wait for the lock reported:\n%s", report)
	}
}

// TestTenthProfiles: -tenth-profiles writes one CPU profile per tenth of
// the timed ingest.
func TestTenthProfiles(t *testing.T) {
	dir := t.TempDir()
	o := options{
		accounts: 400, viewers: 40, follows: 10, events: 2000, seed: 1,
		phase: "ingest", dir: t.TempDir(), logLevel: "error", batchSize: 100, tenthProfiles: dir,
	}
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// Each tenth is a CPU profile of its own stretch of the stream. Tenths
	// this short may hold no sample, so the check is that each one parses
	// as a CPU profile that was running.
	for k := range 10 {
		f, err := os.Open(tenthProfile(dir, k))
		if err != nil {
			t.Fatalf("tenth %d: %v", k+1, err)
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			t.Errorf("tenth %d: %v", k+1, err)
			continue
		}
		if len(p.SampleType) != 2 || p.SampleType[1].Type != "cpu" || p.DurationNanos <= 0 {
			t.Errorf("tenth %d: sample types %v over %d ns, want a CPU profile with a duration", k+1, p.SampleType, p.DurationNanos)
		}
	}
	o.cpuProfile = dir + "/whole.prof"
	if err := run(context.Background(), o, io.Discard); err == nil {
		t.Error("-tenth-profiles with -cpuprofile was accepted")
	}
}

// TestClient runs the getFeed client against a stand-in daemon.
func TestClient(t *testing.T) {
	page := `{"records":[` + strings.Repeat(`{"uri":"at://x","rkey":"3k","value":{}},`, 49) + `{"rkey":"3k"}]}`
	var mu sync.Mutex
	actors := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/xrpc/com.example.appview.getFeed" || r.URL.Query().Get("limit") != "50" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		actors[r.URL.Query().Get("actor")] = true
		mu.Unlock()
		fmt.Fprint(w, page)
	}))
	defer srv.Close()
	o := options{target: srv.URL, namespace: "com.example.appview", viewers: 5, readClients: 1,
		readDuration: 100 * time.Millisecond, warmup: 10 * time.Millisecond, limit: 50, seed: 1}
	var out bytes.Buffer
	if err := runClient(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	var res clientResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res.Requests == 0 || res.Errors != 0 || res.MeanItems != 50 || res.FullShare != 1 || res.P99Ms <= 0 {
		t.Fatalf("result %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(actors) < 2 {
		t.Errorf("the client read %d viewers' feeds, want several", len(actors))
	}
}

func TestMetricsSum(t *testing.T) {
	m := metrics{
		`appview_feed_rows_total{operation="fanout"}`: 10,
		`appview_feed_rows_total{operation="merge"}`:  5,
		`appview_feed_rows_totally`:                   100,
	}
	if got := m.sum(`appview_feed_rows_total{operation="fanout"}`); got != 10 {
		t.Errorf("one sample: %v", got)
	}
	if got := m.sum(`appview_feed_rows_total`); got != 15 {
		t.Errorf("all labels: %v", got)
	}
}

func TestCommittedCountsTheFramesACursorCovers(t *testing.T) {
	// 500 frames, time_us 10 apart but with frame 250 out of order
	// (a replayed, older event): marks hold running maxima.
	g := &generated{}
	var maxUS int64
	for i := range 500 {
		us := int64(10 * (i + 1))
		if i == 249 {
			us = 5
		}
		maxUS = max(maxUS, us)
		if (i+1)%markEvery == 0 {
			g.marks = append(g.marks, maxUS)
		}
	}
	for _, c := range []struct {
		cursor int64
		want   int
	}{
		{0, 0}, {999, 0}, {1000, 100}, {2499, 200}, {2500, 200}, {3000, 300}, {5000, 500}, {9999, 500},
	} {
		if got := g.committed(c.cursor); got != c.want {
			t.Errorf("committed(%d) = %d, want %d", c.cursor, got, c.want)
		}
	}
}

// TestPrefillMovesTheFirstFramesIntoTheSeedLog: -prefill N puts the
// stream's first N frames after the follow graph, untimed, and the timed
// log starts with the stream's frame N+1.
func TestPrefillMovesTheFirstFramesIntoTheSeedLog(t *testing.T) {
	logs := func(prefill int) (seed, main []workload.Frame) {
		o := options{accounts: 200, viewers: 20, follows: 5, events: 300, prefill: prefill, seed: 1,
			dir: t.TempDir(), logLevel: "error"}
		b, err := newBench(o, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		defer b.cleanup()
		if err := b.generate(); err != nil {
			t.Fatal(err)
		}
		return readLog(t, b.gen.seedPath), readLog(t, b.gen.mainPath)
	}
	seed0, main0 := logs(0)
	seed, main := logs(100)
	if len(seed) != len(seed0)+100 {
		t.Fatalf("seed log holds %d frames, want the %d of the graph and 100 more", len(seed), len(seed0))
	}
	for i := range 100 {
		if string(seed[len(seed0)+i].Data) != string(main0[i].Data) {
			t.Fatalf("prefill frame %d is not the stream's frame %d", i, i)
		}
	}
	if len(main) != len(main0) || string(main[0].Data) != string(main0[100].Data) {
		t.Fatalf("timed log: %d frames starting %.60s; want %d starting with the stream's frame 101", len(main), main[0].Data, len(main0))
	}
}

func readLog(t *testing.T, path string) []workload.Frame {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var frames []workload.Frame
	lr := workload.NewLogReader(f)
	for {
		fr, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		fr.Data = append([]byte(nil), fr.Data...)
		frames = append(frames, fr)
	}
}

// -read-rate 0 reads with no ingest; a negative or non-finite rate is
// refused before anything runs.
func TestReadRateIsChecked(t *testing.T) {
	for _, rate := range []float64{-1, math.Inf(1), math.NaN(), 1e-12} {
		o := options{accounts: 400, viewers: 40, follows: 10, events: 2000, seed: 1, phase: "all", readRate: rate}
		err := run(context.Background(), o, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-read-rate") {
			t.Errorf("-read-rate %v: %v, want a refusal", rate, err)
		}
	}
}

// TestReadPhaseKeepsTheKeptDatabasesViewers: a daemon started on the
// database of an earlier ingest run (-phase read) resumes from its cursor
// without recording a gap, though the stream's times lie months before
// the wall clock, so the registered viewers stay complete and their reads
// need no first read.
func TestReadPhaseKeepsTheKeptDatabasesViewers(t *testing.T) {
	db := t.TempDir() + "/appview.db"
	o := options{
		accounts: 400, viewers: 40, follows: 10, events: 2000, seed: 1, registered: true,
		phase: "ingest", dir: t.TempDir(), db: db, logLevel: "error", batchSize: 100,
	}
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}

	o.phase = "read"
	b, err := newBench(o, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer b.cleanup()
	ctx := context.Background()
	if err := b.start(ctx, replay.NewPlaylist()); err != nil {
		t.Fatal(err)
	}
	defer b.shutdown()
	for deadline := time.Now().Add(10 * time.Second); b.server.Connections() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not connect to the fake Jetstream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g, found, err := b.daemon.Store().LastGap(ctx); err != nil || found {
		t.Fatalf("a gap was recorded at start: %+v (found %v, err %v)", g, found, err)
	}
	// Complete, and read moments ago (at its registration): a read has
	// nothing to write.
	lastRead, complete, err := b.daemon.Store().StoredViewer(ctx, syntax.DID(b.w.ViewerDID(0)), "following")
	if err != nil || !complete || time.Since(lastRead) >= feeds.LastReadResolution {
		t.Errorf("viewer 0 after the restart: complete %v, last read %v (err %v), want a complete viewer read moments ago", complete, lastRead, err)
	}
}
