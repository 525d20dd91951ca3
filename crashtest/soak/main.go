// Command soak streams a million generated events through the real daemon
// and watches its memory: it samples the resident set size of the daemon
// process (VmRSS in /proc/<pid>/status) while the stream is applied, prints
// it per quarter of the stream, and fails when the last quarter's peak is
// more than 1.2 times the first quarter's or any sample reaches 256 MiB.
//
//	go run ./crashtest/soak                  # 1,000,000 events
//	go run ./crashtest/soak -events 100000 -warmup 100000 \
//	    -accounts 10000 -viewers 2000        # the short version CI runs
//
// The quarters start after the seed graph and the -warmup events: while
// the database is smaller than SQLite's page caches (88 MiB for the writer,
// 2 MiB per reader by default), RSS grows with it. A million events outgrow that in
// the first quarter; a short run needs the warm-up to measure the plateau.
//
// The daemon runs in index_all mode with the default feed (cap 200, merge
// limit 100), so the prune sweep holds feeds to their cap and retention
// runs as in production; the fake Jetstream (workload/replay) generates
// frames as the daemon reads them, so the stream costs no memory here.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/atfeeds/appview/crashtest"
	"github.com/atfeeds/appview/workload"
	"github.com/atfeeds/appview/workload/replay"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run() error {
	events := flag.Int("events", 1_000_000, "main-stream events to apply and measure")
	warmup := flag.Int("warmup", 0, "main-stream events to apply before the measured quarters")
	accounts := flag.Int("accounts", 20_000, "accounts in the workload")
	viewers := flag.Int("viewers", 5_000, "viewers (accounts that follow others)")
	follows := flag.Int("follows", 50, "mean follows per viewer in the seed graph")
	maxRSS := flag.Int64("max-rss-mib", 256, "no RSS sample may reach this (MiB)")
	ratio := flag.Float64("ratio", 1.2, "the last quarter's peak RSS may be at most this times the first's")
	every := flag.Duration("sample", 200*time.Millisecond, "RSS sampling interval")
	keep := flag.Bool("keep", false, "keep the database and daemon log")
	flag.Parse()

	cfg := workload.DefaultConfig()
	cfg.Accounts, cfg.Viewers, cfg.Follows = *accounts, *viewers, *follows
	cfg.StartUS = time.Now().Truncate(time.Second).UnixMicro()
	w, err := workload.New(cfg)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "appview-soak")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Println("database and log in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	fmt.Println("building cmd/appview")
	bin, err := crashtest.BuildBinary(dir)
	if err != nil {
		return err
	}

	src := newSource(w, *warmup, *events)
	srv, err := replay.NewServer(src, nil)
	if err != nil {
		return err
	}
	defer srv.Close()
	addr, err := crashtest.FreeAddr()
	if err != nil {
		return err
	}
	dbPath := filepath.Join(dir, "appview.db")
	p, err := crashtest.Start(bin, []string{"serve"}, []string{
		"APPVIEW_DATABASE_PATH=" + dbPath,
		"APPVIEW_JETSTREAM_URLS=" + srv.URL(),
		"APPVIEW_HTTP_LISTEN=" + addr,
		"APPVIEW_INGEST_INDEX_ALL=true",
		// Catch-up batches of 60,000 (the default) commit a short run's
		// quarter in one jump of the cursor, which leaves quarters with
		// no sample; the soak watches memory over the stream's length,
		// the bench measures a catch-up's batches.
		"APPVIEW_INGEST_CATCHUP_BATCH_SIZE=5000",
		"APPVIEW_LOG_LEVEL=warn",
	}, filepath.Join(dir, "appview.log"))
	if err != nil {
		return err
	}
	defer p.Signal(syscall.SIGKILL)
	fmt.Printf("daemon pid %d; seed graph of %d viewers × ~%d follows, then %d warm-up and %d measured events\n",
		p.Pid(), cfg.Viewers, cfg.Follows, *warmup, *events)

	ctx := context.Background()
	start := time.Now()
	var measureStart time.Time
	quarters := make([]quarter, 4)
	var peak int64
	for {
		select {
		case <-p.Done():
			return fmt.Errorf("the daemon exited:\n%s", p.Log())
		case <-time.After(*every):
		}
		rss, err := crashtest.RSS(p.Pid())
		if err != nil {
			return err
		}
		peak = max(peak, rss)
		cursor, err := crashtest.ReadCursor(ctx, dbPath)
		if err != nil {
			continue // racing a checkpoint; the next sample counts
		}
		b := src.boundaries()
		if b.startUS == 0 || cursor < b.startUS {
			continue // the seed graph and the warm-up
		}
		if measureStart.IsZero() {
			measureStart = time.Now()
			fmt.Printf("seed graph and warm-up applied in %s, RSS %.1f MiB\n", measureStart.Sub(start).Round(time.Second), mib(rss))
		}
		q := 0
		for q < 3 && b.quarterEnd[q] != 0 && cursor > b.quarterEnd[q] {
			q++
		}
		quarters[q].add(rss, dbSize(dbPath))
		if b.done && cursor >= b.lastUS {
			break
		}
	}
	elapsed := time.Since(measureStart)
	fmt.Printf("%d events applied in %s (%.0f events/s)\n", *events, elapsed.Round(time.Second), float64(*events)/elapsed.Seconds())
	fmt.Println("quarter  samples  RSS MiB: min   mean    max   database+WAL MiB")
	for i, q := range quarters {
		fmt.Printf("Q%d       %7d  %11.1f %6.1f %6.1f   %16.1f\n", i+1, q.n, mib(q.min), mib(q.sum/int64(max(q.n, 1))), mib(q.max), mib(q.file))
	}
	p.Signal(syscall.SIGTERM)
	if exit, err := p.Wait(60 * time.Second); err != nil || exit.Code != 0 {
		return fmt.Errorf("SIGTERM: %s %v\n%s", exit, err, p.Log())
	}

	var problems []error
	if quarters[0].n == 0 || quarters[3].n == 0 {
		problems = append(problems, errors.New("a quarter has no samples: sample more often or stream more events"))
	} else if got := float64(quarters[3].max) / float64(quarters[0].max); got > *ratio {
		problems = append(problems, fmt.Errorf("last quarter's peak RSS is %.2f× the first's (limit %.2f×)", got, *ratio))
	}
	if peak >= *maxRSS<<20 {
		problems = append(problems, fmt.Errorf("peak RSS %.1f MiB reaches the limit of %d MiB", mib(peak), *maxRSS))
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}
	fmt.Printf("ok: peak RSS %.1f MiB (limit %d), last/first quarter %.2f× (limit %.2f×)\n",
		mib(peak), *maxRSS, float64(quarters[3].max)/float64(quarters[0].max), *ratio)
	return nil
}

type quarter struct {
	n             int
	min, max, sum int64
	file          int64 // database size at the last sample
}

func (q *quarter) add(rss, file int64) {
	if q.n == 0 || rss < q.min {
		q.min = rss
	}
	q.max = max(q.max, rss)
	q.sum += rss
	q.n++
	q.file = file
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// dbSize is the database file plus its WAL.
func dbSize(path string) int64 {
	var n int64
	for _, f := range []string{path, path + "-wal"} {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

// source plays the seed graph, then warmup and n main-stream events, and
// records the time_us where the measured events start and where each of
// their quarters ends.
type source struct {
	graph  *workload.GraphStream
	stream *workload.Stream
	warmup int
	n      int

	mu     sync.Mutex
	b      bounds
	sent   int
	inMain bool
}

type bounds struct {
	startUS    int64    // time_us of the last frame before the measured events
	quarterEnd [3]int64 // time_us of the last event of quarters 1–3
	lastUS     int64    // time_us of the last event that is not malformed
	done       bool     // every event has been produced
}

func newSource(w *workload.Workload, warmup, n int) *source {
	return &source{graph: w.Graph(), stream: w.Stream(), warmup: warmup, n: n}
}

func (s *source) boundaries() bounds {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b
}

func (s *source) Next(ctx context.Context) (workload.Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inMain {
		if f, ok := s.graph.Next(); ok {
			s.b.lastUS = f.TimeUS
			if s.warmup == 0 {
				s.b.startUS = f.TimeUS
			}
			return f, nil
		}
		s.inMain = true
	}
	total := s.warmup + s.n
	if s.sent == total {
		s.b.done = true
		return workload.Frame{}, io.EOF
	}
	f := s.stream.Next()
	s.sent++
	if f.Kind != workload.KindMalformed {
		s.b.lastUS = max(s.b.lastUS, f.TimeUS)
	}
	if s.sent == s.warmup {
		s.b.startUS = s.b.lastUS
	}
	for q := 1; q <= 3; q++ {
		if s.sent == s.warmup+s.n*q/4 {
			s.b.quarterEnd[q-1] = s.b.lastUS
		}
	}
	if s.sent == total {
		s.b.done = true
	}
	return f, nil
}
