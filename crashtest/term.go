package crashtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RunTerm stops the daemon with SIGTERM in the middle of a batch, for
// sure: it starts the daemon with a batch that never closes by itself (an
// hour's interval, 100,000 events), appends frames up to index upTo at
// once, waits until the daemon has read them all (its received and dropped
// counters stand still) and sends SIGTERM. The daemon must commit the
// open batch with its cursor and exit 0: the stored cursor then covers
// every frame appended.
func (h *Harness) RunTerm(ctx context.Context, upTo int) error {
	conns := len(h.Server.Queries())
	p, err := h.start("APPVIEW_INGEST_BATCH_INTERVAL=1h", "APPVIEW_INGEST_BATCH_SIZE=100000")
	if err != nil {
		return err
	}
	defer p.Signal(syscall.SIGKILL)
	if !h.Server.WaitConnections(conns+1, 30*time.Second) {
		return fmt.Errorf("the daemon did not subscribe:\n%s", tail(p.Log()))
	}
	h.appendUpTo(upTo)
	read, err := waitReadAll(ctx, p)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, tail(p.Log()))
	}
	before, err := ReadCursor(ctx, h.DBPath)
	if err != nil {
		return err
	}
	p.Signal(syscall.SIGTERM)
	exit, err := p.Wait(30 * time.Second)
	if err == nil && (exit.Code != 0 || !strings.Contains(p.Log(), "appview stopped cleanly")) {
		err = fmt.Errorf("%s, want a clean exit 0", exit)
	}
	if err != nil {
		return fmt.Errorf("SIGTERM: %w\n%s", err, tail(p.Log()))
	}
	want := h.Log.LastTimeUS(upTo)
	after, err := ReadCursor(ctx, h.DBPath)
	if err != nil {
		return err
	}
	if after < want {
		return fmt.Errorf("SIGTERM lost the open batch: the daemon had read %d frames up to time_us %d, the stored cursor went from %d to %d\n%s",
			read, want, before, after, tail(p.Log()))
	}
	h.Landed[StopTerm]++
	h.Logf("SIGTERM with a batch of %d frames open: committed, cursor %d → %d", read, before, after)
	return h.Check(ctx)
}

// waitReadAll polls the daemon's metrics until the frames it has read
// (events received plus frames dropped) stand still for half a second,
// and returns how many it read.
func waitReadAll(ctx context.Context, p *Process) (int64, error) {
	deadline := time.Now().Add(60 * time.Second)
	last, still := int64(-1), 0
	for {
		n, err := framesRead(ctx, p.Base)
		switch {
		case err != nil:
			still = 0
		case n == last && n > 0:
			still++
		default:
			last, still = n, 0
		}
		if still >= 5 {
			return n, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the daemon's read counter did not settle (at %d): %v", last, err)
		}
		select {
		case <-p.Done():
			return 0, fmt.Errorf("the daemon exited (%s) before SIGTERM", p.exit())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func framesRead(ctx context.Context, base string) (int64, error) {
	n, err := metricSum(ctx, base, "appview_jetstream_events_received_total", "appview_jetstream_events_dropped_total")
	return int64(n), err
}

// metricSum scrapes the daemon's /metrics and adds up the samples of the
// named metrics, every label set of each.
func metricSum(ctx context.Context, base string, names ...string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.Lines(string(body)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if name, _, _ := strings.Cut(f[0], "{"); !slices.Contains(names, name) {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}
