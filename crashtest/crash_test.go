//go:build crash

package crashtest

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/atfeeds/appview/failpoint"
	"github.com/atfeeds/appview/workload"
)

var (
	buildOnce sync.Once
	bin       string
	buildErr  error
	binDir    string
)

// binary builds cmd/appview once per test run; CRASHTEST_BIN names a
// binary to use instead (one built from another tree, say).
func binary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("CRASHTEST_BIN"); b != "" {
		return b
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "appview-crash-bin")
		if buildErr == nil {
			bin, buildErr = BuildBinary(binDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// workDir is a fresh directory for a scenario's database and daemon logs:
// under CRASHTEST_DIR when set, where it stays for a post-mortem, else a
// test temporary directory.
func workDir(t *testing.T) string {
	root := os.Getenv("CRASHTEST_DIR")
	if root == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp(root, t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("database and daemon logs kept in %s", dir)
	return dir
}

// crashWorkload is a few thousand accounts with a harsher mix than the
// benchmark's: more deletes, unfollows, updates, duplicates and junk.
func crashWorkload(seed uint64) workload.Config {
	cfg := workload.DefaultConfig()
	cfg.Seed = seed
	// Recent event times: a cursor months old is a stream gap to the
	// daemon (older than Jetstream keeps), which it records at every
	// reconnect.
	cfg.StartUS = time.Now().Add(-10 * time.Minute).Truncate(time.Second).UnixMicro()
	cfg.Accounts, cfg.Viewers, cfg.Follows = 5000, 2000, 20
	cfg.Mix = workload.Mix{
		PostCreate: 0.70, PostUpdate: 0.03, PostDelete: 0.10,
		FollowCreate: 0.12, FollowDelete: 0.05,
		Duplicate: 0.03, Malformed: 0.01,
	}
	return cfg
}

// scenario is one crash run: a log, the ways each run of the daemon ends,
// and fake-server faults.
type scenario struct {
	seed      uint64
	main      int    // main-stream frames
	stops     []Stop // one per run, after the first (a random kill)
	dropEvery int
	env       []string
	pace      time.Duration
}

func runScenario(t *testing.T, sc scenario) *Harness {
	start := time.Now()
	l, err := NewLog(crashWorkload(sc.seed), sc.main)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHarness(l, binary(t), workDir(t), sc.seed)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Logf = t.Logf
	h.Env = append([]string{
		"APPVIEW_INGEST_BATCH_INTERVAL=50ms",
		"APPVIEW_INGEST_BATCH_SIZE=250",
		// Catch-up batches on, but small: many batch boundaries to kill at.
		"APPVIEW_INGEST_CATCHUP_BATCH_SIZE=2000",
		// Small, so that a connection dropped every few hundred frames
		// still moves forward; big enough to replay a few batches.
		"APPVIEW_JETSTREAM_REWIND=100ms",
		"APPVIEW_SWEEP_RECOVERY_INTERVAL=1s",
		"APPVIEW_SWEEP_IDLE_INTERVAL=100ms",
	}, sc.env...)
	if sc.pace > 0 {
		h.Pace = sc.pace
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Poll(ctx, 100*time.Millisecond)

	counts := l.Counts()
	t.Logf("log: %d frames: %d seed follows, %d post creates, %d updates, %d deletes, %d follows, %d unfollows, %d duplicates, %d malformed",
		len(l.Frames), counts[workload.KindFollowSeed], counts[workload.KindPostCreate], counts[workload.KindPostUpdate],
		counts[workload.KindPostDelete], counts[workload.KindFollowCreate], counts[workload.KindFollowDelete],
		counts[workload.KindDuplicate], counts[workload.KindMalformed])

	if err := h.First(ctx); err != nil {
		t.Fatal(err)
	}
	if sc.dropEvery > 0 {
		h.Server.DropEvery(sc.dropEvery)
	}
	for i, stop := range sc.stops {
		upTo := l.SeedFrames + (len(l.Frames)-l.SeedFrames)*(i+1)/(len(sc.stops)+1)
		run := func() error { return h.Run(ctx, stop, upTo) }
		if stop == StopTerm {
			run = func() error { return h.RunTerm(ctx, upTo) }
		}
		if err := run(); err != nil {
			t.Fatalf("run %d: %v", i+2, err)
		}
	}
	if err := h.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	n := noneWentBack(t, "the stored cursor", h.Polled)
	t.Logf("stops: %s", landedSummary(h.Landed))
	t.Logf("cursor after each stop never went back (%d stops, %d → %d); %d polled reads never went back",
		len(h.Cursors), h.Cursors[0], h.Cursors[len(h.Cursors)-1], n)
	t.Logf("%d subscriptions, %d daemon runs, %s", len(h.Server.Queries()), h.runs, time.Since(start).Round(time.Second))
	return h
}

// noneWentBack fails t if a cursor read by a poller went back, and
// returns how many reads counted. what names the cursor.
func noneWentBack(t *testing.T, what string, polled func() (int, []string)) int {
	t.Helper()
	n, back := polled()
	if len(back) > 0 {
		t.Errorf("%s went back while polled: %s", what, strings.Join(back, "; "))
	}
	return n
}

func landedSummary(m map[Stop]int) string {
	var parts []string
	for s, n := range m {
		parts = append(parts, fmt.Sprintf("%s: %d", s, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// cycleStops repeats the given stops until there are n.
func cycleStops(n int, stops ...Stop) []Stop {
	out := make([]Stop, n)
	for i := range out {
		out[i] = stops[i%len(stops)]
	}
	return out
}

// TestCrashKill kills the daemon 28 times: at random moments and at the
// failpoints inside the batch transaction (after the fan-out, before the
// cursor; after the cursor, before the commit) and after the commit before
// the sweep tick.
func TestCrashKill(t *testing.T) {
	h := runScenario(t, scenario{
		seed: 1, main: 40_000,
		stops: cycleStops(27, StopKill,
			StopAt(failpoint.IngestBeforeCursor), StopAt(failpoint.IngestBeforeCommit), StopAt(failpoint.IngestAfterCommit)),
	})
	kills := h.Landed[StopKill]
	for _, name := range []string{failpoint.IngestBeforeCursor, failpoint.IngestBeforeCommit, failpoint.IngestAfterCommit} {
		if h.Landed[StopAt(name)] == 0 {
			t.Errorf("no kill landed at %s", name)
		}
		kills += h.Landed[StopAt(name)]
	}
	if kills < 20 {
		t.Errorf("%d kills landed, want at least 20", kills)
	}
}

// TestCrashDrops runs the stream through a server that drops the
// connection every 500 frames, with kills on top.
func TestCrashDrops(t *testing.T) {
	runScenario(t, scenario{
		seed: 2, main: 20_000, dropEvery: 500,
		stops: cycleStops(8, StopKill, StopAt(failpoint.IngestBeforeCommit)),
	})
}

// TestCrashGracefulStop stops the daemon with SIGTERM ten times, each time
// with a batch open that holds everything the run read (see RunTerm): the
// batch must be committed with its cursor, and the daemon exit 0.
func TestCrashGracefulStop(t *testing.T) {
	h := runScenario(t, scenario{seed: 3, main: 20_000, stops: cycleStops(10, StopTerm)})
	if h.Landed[StopTerm] != 10 {
		t.Errorf("%d clean stops, want 10", h.Landed[StopTerm])
	}
}

// TestCrashDropsWithDefaultRewind is TestCrashDrops with the default
// rewind (5 s): a server that drops the connection every 300 frames, on a
// stream of about 1,000 events a second. Each reconnect resumes from the
// committed cursor minus the rewind, about 5,000 frames back, so a session
// that ends after 300 frames never gets past the replay: the stored cursor
// must still reach the end of the log.
func TestCrashDropsWithDefaultRewind(t *testing.T) {
	cfg := crashWorkload(4)
	cfg.Accounts, cfg.Viewers, cfg.Follows = 500, 100, 10
	l, err := NewLog(cfg, 5000)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHarness(l, binary(t), t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Logf = t.Logf
	h.Env = []string{"APPVIEW_INGEST_BATCH_INTERVAL=50ms"}
	ctx := context.Background()
	if err := h.First(ctx); err != nil {
		t.Fatal(err)
	}
	h.Server.DropEvery(300)
	p, err := h.start()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Signal(syscall.SIGKILL)
	h.appendUpTo(len(l.Frames))
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	if err := WaitCursor(wctx, h.DBPath, p, l.EndUS); err != nil {
		c, _ := ReadCursor(ctx, h.DBPath)
		_ = h.Model.AdvanceTo(c)
		t.Fatalf("livelock: after %d subscriptions in 45 s the cursor is at frame %d of %d (%d µs before the end): %v",
			len(h.Server.Queries()), h.Model.next, len(l.Frames), l.EndUS-c, err)
	}
	t.Logf("%d subscriptions", len(h.Server.Queries()))
}
