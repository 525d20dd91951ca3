package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/atfeeds/appview/workload/replay"
)

// tenth is one tenth of the timed stream, as the committed cursor passed
// its last frame.
type tenth struct {
	events    int
	seconds   float64
	fanout    float64 // feed rows written by fan-out during the tenth
	rssBytes  int64   // VmRSS when the tenth was committed
	doneAtSec float64
}

type ingestResult struct {
	tenths        [10]tenth
	events        int // frames the cursor covered when the last tenth was done
	seconds       float64
	fanoutRows    float64
	peakRSS       int64
	peakNotReset  error // why VmHWM could not start over with the ingest
	seedSeconds   float64
	seedPeakRSS   int64
	reconnections int64
	replayed      int64 // frames sent again to a reconnect
	gaps          int64 // reconnects the server could not replay in full
	stepAways     float64
	walRestarts   float64 // RESTART checkpoints during the timed ingest
	batches       float64 // transactions committed by the ingester during it
	// Of those, the batches cut short for a request's write, and the
	// writes other than the ingester's that waited for the lock, by
	// writer (request, background): how many, and their waits in all.
	batchesCut float64
	lockWaits  map[string]lockWait
	// The parts those writes stopped at once, and after the minimum.
	stopsAtOnce, stopsAfterMinimum float64
}

// The series of appview_ingest_part_stops_total.
const (
	stopsAtOnce       = `appview_ingest_part_stops_total{when="at_once"}`
	stopsAfterMinimum = `appview_ingest_part_stops_total{when="after_minimum"}`
)

// lockWait sums appview_database_write_lock_wait_seconds of one writer.
type lockWait struct{ count, seconds float64 }

// lockWriters are the writer label's values.
var lockWriters = []string{"request", "background"}

func lockWaitsOf(m metrics) map[string]lockWait {
	out := map[string]lockWait{}
	for _, w := range lockWriters {
		out[w] = lockWait{
			count:   m.sum(`appview_database_write_lock_wait_seconds_count{writer="` + w + `"}`),
			seconds: m.sum(`appview_database_write_lock_wait_seconds_sum{writer="` + w + `"}`),
		}
	}
	return out
}

// ingestPhase plays the seed graph (not timed), then the main stream, and
// times each tenth of it from the committed cursor.
func (b *bench) ingestPhase(ctx context.Context) (ingestResult, error) {
	var res ingestResult
	seedStart := time.Now()
	if err := b.waitCursor(ctx, b.gen.seedLastUS, nil); err != nil {
		return res, fmt.Errorf("seed phase: %w", err)
	}
	res.seedSeconds = time.Since(seedStart).Seconds()
	res.seedPeakRSS = procStatus("VmHWM")
	seeded := b.gen.seedFrames + b.o.prefill
	fmt.Fprintf(b.out, "\nseed graph: %d follow creates and %d prefill stream frames applied in %.1fs (%.0f events/s, not part of the figures below); peak RSS %.0f MiB\n",
		b.gen.seedFrames, b.o.prefill, res.seedSeconds, float64(seeded)/res.seedSeconds, float64(res.seedPeakRSS)/(1<<20))

	main, err := os.Open(b.gen.mainPath)
	if err != nil {
		return res, err
	}
	defer main.Close()
	profile := b.o.cpuProfile
	if b.o.tenthProfiles != "" {
		profile = tenthProfile(b.o.tenthProfiles, 0)
	}
	stopProfile, err := startProfile(profile)
	if err != nil {
		return res, err
	}
	defer func() { stopProfile() }()
	res.peakNotReset = resetPeakRSS()
	metrics, err := scrape(ctx, b.base)
	if err != nil {
		return res, err
	}
	fanout0 := metrics.sum(`appview_feed_rows_total{operation="fanout"}`)
	restarts0 := metrics.sum(`appview_database_wal_restarts_total`)
	batches0 := metrics.sum(`appview_ingest_batches_total`)
	stepAways0 := metrics.sum(`appview_jetstream_step_aways_total`)
	cut0 := metrics.sum(`appview_ingest_batches_cut_total`)
	atOnce0, afterMinimum0 := metrics.sum(stopsAtOnce), metrics.sum(stopsAfterMinimum)
	waits0 := lockWaitsOf(metrics)
	connections0 := b.server.Connections()
	replayed0, gaps0 := b.server.Replayed(), b.server.Gaps()
	lastFanout, lastT := fanout0, 0.0
	fmt.Fprintf(b.out, "\ningest: %d events (the mix above) through websocket → decode → batch → SQLite → fan-out → cursor\n", b.o.events)
	fmt.Fprintf(b.out, "%-7s %9s %8s %10s %14s %8s\n", "tenth", "events", "seconds", "events/s", "fanout rows/s", "RSS MiB")
	start := time.Now()
	b.playlist.Add(replay.Log(main))
	var probe *writeProbe
	if b.o.writeProbe > 0 {
		probe = b.startWriteProbe(ctx, b.o.writeProbe)
	}
	var firstReads *firstReadProbe
	if b.o.firstReadProbe > 0 {
		firstReads = b.startFirstReadProbe(ctx, b.o.firstReadProbe, b.o.firstReadClients)
	}

	// The cursor moves a commit at a time, and a catch-up commit (up to
	// 30,000 frames) can cover more than a tenth of a short stream. A tenth
	// boundary is placed inside the commit that crossed it by linear
	// interpolation, time and fan-out rows in proportion to frames: each
	// tenth crossed by one commit gets that commit's rate, where closing
	// them all at the reading gave the later ones 0 events in 0 s
	// (TestEveryTenthIsMeasured).
	k := 0
	prevCursor, prevC, prevT := int64(0), 0, 0.0 // the last reading the cursor moved at
	scrapeC, scrapeF := 0, fanout0               // where fan-out rows were last read
	lastCommitted := 0
	var tickErr error
	err = b.waitCursor(ctx, b.gen.boundaries[9], func(cursor int64) {
		if cursor == prevCursor {
			return
		}
		now := time.Since(start).Seconds()
		committed := b.gen.committed(cursor)
		if k < 10 && cursor >= b.gen.boundaries[k] {
			m, err := scrape(ctx, b.base)
			if err != nil {
				tickErr = err
			}
			fanNow := m.sum(`appview_feed_rows_total{operation="fanout"}`)
			for k < 10 && cursor >= b.gen.boundaries[k] {
				bk := min(b.gen.committed(b.gen.boundaries[k]), committed)
				f := 1.0
				if committed > prevC {
					f = float64(bk-prevC) / float64(committed-prevC)
				}
				tCross := prevT + f*(now-prevT)
				fanCross := fanNow
				if committed > scrapeC {
					fanCross = scrapeF + (fanNow-scrapeF)*float64(bk-scrapeC)/float64(committed-scrapeC)
				}
				res.tenths[k] = tenth{
					events:    bk - lastCommitted,
					seconds:   tCross - lastT,
					fanout:    fanCross - lastFanout,
					rssBytes:  procStatus("VmRSS"),
					doneAtSec: tCross,
				}
				lastFanout, lastT, lastCommitted = fanCross, tCross, bk
				t := res.tenths[k]
				fmt.Fprintf(b.out, "%-7d %9d %8.2f %10.0f %14.0f %8.0f\n", k+1, t.events, t.seconds,
					float64(t.events)/t.seconds, t.fanout/t.seconds, float64(t.rssBytes)/(1<<20))
				if b.o.tenthProfiles != "" && k < 9 && tickErr == nil {
					// One CPU profile per tenth, so the first and the last
					// can be compared (pprof -diff_base).
					stopProfile()
					next, err := startProfile(tenthProfile(b.o.tenthProfiles, k+1))
					if err != nil {
						next, tickErr = func() {}, err
					}
					stopProfile = next
				}
				if k == 4 && b.o.memProfile != "" {
					if err := writeHeapProfile(b.o.memProfile); err != nil {
						tickErr = err
					}
				}
				k++
			}
			scrapeC, scrapeF = committed, fanNow
		}
		prevCursor, prevC, prevT = cursor, committed, now
	})
	if probe != nil {
		// Stopped as the last tenth is done, before its figures print.
		if perr := probe.stop(b); perr != nil && err == nil {
			err = perr
		}
	}
	if firstReads != nil {
		if perr := firstReads.stop(b); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		return res, fmt.Errorf("ingest phase: %w", err)
	}
	if tickErr != nil {
		return res, tickErr
	}
	res.seconds = lastT
	res.events = lastCommitted
	res.fanoutRows = lastFanout - fanout0
	if m, err := scrape(ctx, b.base); err == nil {
		res.walRestarts = m.sum(`appview_database_wal_restarts_total`) - restarts0
		res.stepAways = m.sum(`appview_jetstream_step_aways_total`) - stepAways0
		res.batches = m.sum(`appview_ingest_batches_total`) - batches0
		res.batchesCut = m.sum(`appview_ingest_batches_cut_total`) - cut0
		res.stopsAtOnce, res.stopsAfterMinimum = m.sum(stopsAtOnce)-atOnce0, m.sum(stopsAfterMinimum)-afterMinimum0
		res.lockWaits = lockWaitsOf(m)
		for w, v := range res.lockWaits {
			res.lockWaits[w] = lockWait{v.count - waits0[w].count, v.seconds - waits0[w].seconds}
		}
	}
	res.peakRSS = procStatus("VmHWM")
	res.reconnections = b.server.Connections() - connections0
	res.replayed, res.gaps = b.server.Replayed()-replayed0, b.server.Gaps()-gaps0
	b.printIngest(res)
	return res, nil
}

func (b *bench) printIngest(res ingestResult) {
	first := float64(res.tenths[0].events) / res.tenths[0].seconds
	last := float64(res.tenths[9].events) / res.tenths[9].seconds
	fmt.Fprintf(b.out, "overall: %.0f events/s over %.1fs; last tenth / first tenth = %.0f%%\n",
		float64(res.events)/res.seconds, res.seconds, 100*last/first)
	fmt.Fprintf(b.out, "fan-out: %.0f rows in total, %.0f rows/s (appview_feed_rows_total{operation=\"fanout\"})\n",
		res.fanoutRows, res.fanoutRows/res.seconds)
	if res.peakNotReset != nil {
		fmt.Fprintf(b.out, "peak RSS of the whole run, the seed phase included (%v): %.0f MiB\n", res.peakNotReset, float64(res.peakRSS)/(1<<20))
	} else {
		fmt.Fprintf(b.out, "peak RSS during the timed ingest (VmHWM, reset when it started): %.0f MiB\n", float64(res.peakRSS)/(1<<20))
	}
	fmt.Fprintf(b.out, "WAL RESTART checkpoints during the timed ingest: %.0f (appview_database_wal_restarts_total)\n", res.walRestarts)
	if res.batches > 0 {
		fmt.Fprintf(b.out, "batches committed during the timed ingest: %.0f, %.0f events each on average (appview_ingest_batches_total)\n",
			res.batches, float64(res.events)/res.batches)
		fmt.Fprintf(b.out, "  %.0f of them cut short for a request's write (appview_ingest_batches_cut_total)\n", res.batchesCut)
		if res.stopsAtOnce+res.stopsAfterMinimum > 0 {
			fmt.Fprintf(b.out, "  parts stopped for those writes: %.0f at once, %.0f after 10 ms of applying (appview_ingest_part_stops_total)\n",
				res.stopsAtOnce, res.stopsAfterMinimum)
		}
	}
	for _, w := range lockWriters {
		if v := res.lockWaits[w]; v.count > 0 {
			fmt.Fprintf(b.out, "%s writes beside the ingester's: %.0f, waiting %.0f ms for the write lock on average (appview_database_write_lock_wait_seconds{writer=%q})\n",
				w, v.count, 1000*v.seconds/v.count, w)
		}
	}
	if res.reconnections > 0 {
		// The daemon steps away from its connection while its queue stays
		// full (jetstream.Config.StallTimeout); the server replays from
		// the cursor it comes back with, as Jetstream does.
		fmt.Fprintf(b.out, "the daemon reconnected %d times during the timed ingest, %.0f of them stepping away while a batch held its queue full (appview_jetstream_step_aways_total); %d frames sent again\n",
			res.reconnections, res.stepAways, res.replayed)
	}
	if res.gaps > 0 {
		fmt.Fprintf(b.out, "WARNING: %d reconnects asked for frames older than the server kept; frames were lost and the figures are not valid\n", res.gaps)
	}
	if n := b.logs.warnings.Load(); n > 0 {
		fmt.Fprintf(b.out, "daemon logged %d warnings or errors (%d mention \"locked\")\n", n, b.logs.locked.Load())
	}
}

// tenthProfile is the path of tenth k's CPU profile (-tenth-profiles).
func tenthProfile(dir string, k int) string {
	return filepath.Join(dir, fmt.Sprintf("tenth%02d.prof", k+1))
}

// writeHeapProfile writes the heap in use now to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

// startProfile starts a CPU profile into path (none when path is empty);
// the returned function stops it and closes the file.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
