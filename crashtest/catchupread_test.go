//go:build crash

package crashtest

import (
	"context"
	"testing"
	"time"

	"github.com/atfeeds/appview/failpoint"
)

// TestCrashFirstReadsDuringACatchUp kills the daemon right after first
// reads cut its catch-up's batches. Read-driven mode, a log of 2,000
// accounts (150 viewers, 20 follows each) and a LogWorld whose PDSes hold
// the records the whole log leaves, answering 50 ms late. Each of 12 runs
// reads the feeds of the next few viewers whose first read is not
// complete and, once one is listing, appends 10,000 frames at once: a
// backlog the daemon applies as a catch-up's batch in parts. The first
// reads' registrations and listing pages are urgent writes, which stop
// those parts and commit them early, with the cursor of what was applied
// in full or one carried from an earlier stop (appview/ingest_stop.go),
// the rest held in memory. Runs end at ingest.after_cut (right after such
// a commit), ingest.before_commit, backfill.after_page or at a random
// moment. After each stop the cursor must not have gone back and every
// feed row must be a post of the log at its position. A last run streams
// the rest and reads every viewer: every feed must then be the whole
// log's, as the replay and the listings merged by record key and revision
// leave it. A cut whose cursor covered events it had not applied loses
// them to the kill (the rewind is 100 ms): with the batch's own cursor
// stored at a cut, 870 posts of unfollowed authors stayed in feeds and
// others were missing.
func TestCrashFirstReadsDuringACatchUp(t *testing.T) {
	start := time.Now()
	const seed, runs, perRun = 21, 12, 10000
	cfg := crashWorkload(seed)
	cfg.Accounts, cfg.Viewers, cfg.Follows = 2000, 150, 20
	// Posting spread thin: every author's posts fit a listing of a few
	// pages, so first reads end within a run or two.
	cfg.PostSkew = 0.5
	l, err := NewLog(cfg, runs*perRun)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewLogWorld(l, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Pages 50 ms apart, as over a network: a first read's urgent writes
	// spread over the catch-up instead of ending before it is under way.
	for _, pds := range w.PDSes {
		pds.SetLatency(50 * time.Millisecond)
	}
	h, err := NewCatchUpReadHarness(l, w, binary(t), workDir(t), seed)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Logf = t.Logf
	h.Env = []string{
		"APPVIEW_INGEST_BATCH_INTERVAL=50ms",
		"APPVIEW_INGEST_BATCH_SIZE=250",
		// Small: a commit whose cursor passed over events it did not
		// apply loses them to the kill after it; a rewind of seconds
		// would replay them and hide the loss.
		"APPVIEW_JETSTREAM_REWIND=100ms",
	}
	t.Logf("log: %d frames over %d accounts; at its end the PDSes hold up to %d posts and %d follows an account",
		len(l.Frames), cfg.Accounts, w.MostPosts, w.MostFollows)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Poll(ctx, 100*time.Millisecond)
	if err := h.First(ctx); err != nil {
		t.Fatal(err)
	}
	stops := cycleStops(runs, StopAt(failpoint.IngestAfterCut), StopKill, StopAt(failpoint.IngestAfterCut),
		StopAt(failpoint.IngestBeforeCommit), StopAt(failpoint.IngestAfterCut), StopAt(failpoint.BackfillAfterPage))
	for i, stop := range stops {
		if err := h.Run(ctx, stop, l.SeedFrames+(i+1)*perRun, cfg.Viewers*(i+1)/(runs+1)); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	if err := h.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	n := noneWentBack(t, "the stored cursor", h.Polled)
	// A kill there is the proof that a first read cut a catch-up's batch.
	// A run whose catch-up no first read cut ends without it (missed).
	if n := h.Landed[StopAt(failpoint.IngestAfterCut)]; n < 2 {
		t.Errorf("%d kills landed at %s, want at least 2 of the 6 armed: the first reads missed the catch-ups", n, failpoint.IngestAfterCut)
	}
	t.Logf("stops: %s", landedSummary(h.Landed))
	t.Logf("%d polled cursor reads, none went back; %d daemon runs, %s", n, h.runs, time.Since(start).Round(time.Second))
}
