package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/atfeeds/appview/workload/replay"
)

// readPhase starts a live ingest of the continuing stream at -read-rate,
// then runs the getFeed clients in a separate process (this binary with
// -client) and reports what they measured, and what ingest kept up with
// meanwhile.
func (b *bench) readPhase(ctx context.Context) (clientResult, error) {
	var res clientResult
	// A database reused from an earlier read phase is ahead of the log:
	// its frames are skipped, not paced.
	// -read-rate 0 adds none: Throttle needs a positive rate (0 made
	// its interval overflow, and the rest of the stream came unpaced).
	if b.o.readRate > 0 {
		resume := replay.After(replay.Stream(b.stream, -1), b.daemon.Store().Cursor().TimeUS)
		b.playlist.Add(replay.Throttle(resume, b.o.readRate))
	}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	args := []string{"-client",
		"-target", b.base,
		"-namespace", b.cfg.XRPC.Namespace,
		"-viewers", strconv.Itoa(b.o.viewers),
		"-read-clients", strconv.Itoa(b.o.readClients),
		"-read-duration", b.o.readDuration.String(),
		"-warmup", b.o.warmup.String(),
		"-limit", strconv.Itoa(b.o.limit),
		"-seed", strconv.FormatUint(b.o.seed, 10),
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr

	// Measure ingest over the clients' measuring window: after their
	// warm-up, until they stop.
	sent0, cursor0 := b.server.Sent(), b.daemon.Store().Cursor().TimeUS
	restarts0, batches0 := -1.0, -1.0
	if m, err := scrape(ctx, b.base); err == nil {
		restarts0 = m.sum(`appview_database_wal_restarts_total`)
		batches0 = m.sum(`appview_ingest_batches_total`)
	}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start client process: %w", err)
	}
	var sent1 int64
	var cursor1 int64
	var t1 time.Time
	timer := time.NewTimer(b.o.warmup)
	var served0 metrics
	select {
	case <-timer.C:
		sent0, cursor0 = b.server.Sent(), b.daemon.Store().Cursor().TimeUS
		served0, _ = scrape(ctx, b.base)
	case <-ctx.Done():
	}
	stopProfile, err := startProfile(b.o.readCPUProfile)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	waitErr := cmd.Wait()
	stopProfile()
	t1 = time.Now()
	sent1, cursor1 = b.server.Sent(), b.daemon.Store().Cursor().TimeUS
	if waitErr != nil {
		return res, fmt.Errorf("client process: %w", waitErr)
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return res, fmt.Errorf("client output %q: %w", out.String(), err)
	}
	secs := t1.Sub(t0).Seconds()
	fmt.Fprintf(b.out, "\nread: %d clients in a separate process, random viewers' feeds, limit %d, over loopback HTTP, %.0fs, while ingest runs at %.0f events/s\n",
		b.o.readClients, b.o.limit, res.Seconds, b.o.readRate)
	fmt.Fprintf(b.out, "getFeed: %.0f requests/s; p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.1f ms; %d requests, %d errors (%d mention \"locked\")\n",
		res.RPS, res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs, res.Requests, res.Errors, res.Locked)
	fmt.Fprintf(b.out, "pages: %.1f items on average, %.0f%% full\n", res.MeanItems, 100*res.FullShare)
	if res.FirstError != "" {
		fmt.Fprintf(b.out, "first error: %s\n", res.FirstError)
	}
	fmt.Fprintf(b.out, "ingest meanwhile: %.0f events/s served, cursor advanced %.1fs of stream time in %.1fs\n",
		float64(sent1-sent0)/secs, float64(cursor1-cursor0)/1e6, secs)
	if m, err := scrape(ctx, b.base); err == nil {
		hits := m.sum(`appview_feed_record_cache_lookups_total{result="hit"}`)
		misses := m.sum(`appview_feed_record_cache_lookups_total{result="miss"}`)
		if hits+misses > 0 {
			fmt.Fprintf(b.out, "record cache: %.0f%% of page items hit, %.1f MiB held (database.record_cache_mb)\n",
				100*hits/(hits+misses), m.sum("appview_feed_record_cache_bytes")/(1<<20))
		}
		// The handler's own time, against the client's: what of the tail
		// is spent outside the daemon's handler (the client process, the
		// loopback, waiting for a CPU).
		if served0 != nil {
			const hist = "appview_xrpc_request_duration_seconds_bucket"
			all := m.bucket(hist, "getFeed", "+Inf") - served0.bucket(hist, "getFeed", "+Inf")
			in5 := m.bucket(hist, "getFeed", "0.005") - served0.bucket(hist, "getFeed", "0.005")
			in10 := m.bucket(hist, "getFeed", "0.01") - served0.bucket(hist, "getFeed", "0.01")
			if all > 0 {
				fmt.Fprintf(b.out, "getFeed in the daemon's handler: %.2f%% over 5 ms, %.2f%% over 10 ms (appview_xrpc_request_duration_seconds)\n",
					100*(all-in5)/all, 100*(all-in10)/all)
			}
		}
		// A RESTART waits, under the write lock, for the pages being read,
		// and the reads are what make the WAL guard try one; this counts
		// those that completed during the read phase.
		if restarts0 >= 0 {
			fmt.Fprintf(b.out, "WAL RESTART checkpoints during the read phase: %.0f (appview_database_wal_restarts_total)\n",
				m.sum(`appview_database_wal_restarts_total`)-restarts0)
		}
		// How the live stream was batched: a busy writer stretches its
		// batches up to ingest.max_batch_interval.
		if batches0 >= 0 {
			fmt.Fprintf(b.out, "live batches committed since the read phase began: %.0f; the next one waits %.2fs (appview_ingest_batch_interval_seconds)\n",
				m.sum(`appview_ingest_batches_total`)-batches0, m.sum(`appview_ingest_batch_interval_seconds`))
		}
	}
	fmt.Fprintf(b.out, "daemon RSS after the read phase %.0f MiB\n", float64(procStatus("VmRSS"))/(1<<20))
	if n := b.logs.warnings.Load(); n > 0 {
		fmt.Fprintf(b.out, "daemon logged %d warnings or errors so far (%d mention \"locked\")\n", n, b.logs.locked.Load())
	}
	return res, nil
}
