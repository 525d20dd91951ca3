// Command appview-load shows what a burst of first reads does to a
// running daemon: it runs the daemon in-process (index_all off, the public
// mode) against a fake PLC directory, a fake PDS holding a few hundred
// accounts and a fake Jetstream fed at about 1000 events/s; existing
// viewers read their feeds throughout, first without and then with a
// burst of first reads for thousands of unknown actors from several
// clients, each on its own loopback address (127.0.0.10, .11, …) so the
// per-client buckets apply as they would to distinct peers.
//
// It prints the share of 429 and 503 answers to the burst, the existing
// viewers' p50 and p99 against the unloaded phase (the target is within
// 2×), the ingest lag and the peak RSS of the process (daemon, fakes and
// load generator together). It is a measurement, not a test: see
// docs/hostile.md for the figures; main_test.go runs a short functional
// version.
//
//	go run ./cmd/appview-load
//	go run ./cmd/appview-load -clients 16 -burst-rate 500 -phase 10s -rounds 5
//
// Linux routes all of 127.0.0.0/8 to loopback; elsewhere (macOS) the
// extra client addresses must be configured first, or use -clients 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

type options struct {
	accounts  int           // accounts with posts on the fake PDS
	viewers   int           // existing viewers, whose first reads are done before measuring
	follows   int           // follows per viewer and per newcomer
	posts     int           // posts per account on the PDS
	rate      int           // Jetstream events per second
	phase     time.Duration // length of each measured phase
	rounds    int           // unloaded+loaded phase pairs
	readers   int           // concurrent readers of existing viewers' feeds
	readRate  int           // existing viewers' reads per second, all readers together
	clients   int           // burst clients, one loopback address each
	burstRate int           // first-read requests per second per burst client
	burstConc int           // requests in flight per burst client
	dir       string        // where the database goes (default a temporary directory)
	verbose   bool          // daemon logs to stderr
	separate  bool          // the daemon in a child process
	profile   string        // CPU profile of the loaded phases, when set
	seed      uint64
	// maxRunning and maxQueued override backfill.admission when set.
	maxRunning int
	maxQueued  *int
	// firstReadWait overrides backfill.first_read_wait when set (the
	// functional test shortens it; the command runs the default).
	firstReadWait time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.accounts, "accounts", 300, "accounts with posts on the fake PDS")
	flag.IntVar(&o.viewers, "viewers", 50, "existing viewers reading their feeds")
	flag.IntVar(&o.follows, "follows", 20, "follows per viewer and per newcomer")
	flag.IntVar(&o.posts, "posts", 10, "posts per account on the PDS before the run")
	flag.IntVar(&o.rate, "rate", 1000, "Jetstream events per second during the run")
	flag.DurationVar(&o.phase, "phase", 5*time.Second, "length of each unloaded and each loaded phase")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of an unloaded then a loaded phase")
	flag.IntVar(&o.readers, "readers", 4, "concurrent readers of existing viewers' feeds")
	flag.IntVar(&o.readRate, "read-rate", 200, "existing viewers' reads per second, all readers together")
	flag.IntVar(&o.clients, "clients", 8, "burst clients, each on its own loopback address")
	flag.IntVar(&o.burstRate, "burst-rate", 100, "first-read requests per second per burst client (each for a new unknown actor)")
	flag.IntVar(&o.burstConc, "burst-concurrency", 32, "requests in flight per burst client")
	flag.StringVar(&o.dir, "dir", "", "directory for the database (default: a temporary directory, removed)")
	flag.BoolVar(&o.verbose, "v", false, "daemon logs (warnings and up) to stderr")
	flag.BoolVar(&o.separate, "separate", true, "run the daemon in a child process, apart from the fakes and the load generator")
	daemonConfig := flag.String("daemon-config", "", "internal: run only the daemon on this config file (the child of -separate)")
	flag.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the loaded phases to this file")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the follow graph")
	flag.IntVar(&o.maxRunning, "max-running", 0, "backfill.admission.max_running (default: the daemon's)")
	flag.Func("max-queued", "backfill.admission.max_queued (default: the daemon's)", func(v string) error {
		n, err := strconv.Atoi(v)
		o.maxQueued = &n
		return err
	})
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *daemonConfig != "" {
		if err := serveDaemon(ctx, *daemonConfig, o.verbose, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "appview-load daemon:", err)
			os.Exit(1)
		}
		return
	}
	if _, err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "appview-load:", err)
		os.Exit(1)
	}
}

// run sets up the fake network and the daemon, runs both phases and
// prints the report to out.
func run(ctx context.Context, o options, out io.Writer) (*report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	w, err := newWorld(ctx, o)
	if err != nil {
		return nil, err
	}
	defer w.close()
	rep, err := w.measure(ctx)
	if err != nil {
		return nil, err
	}
	rep.print(out, o)
	return rep, nil
}

func (o options) validate() error {
	switch {
	case o.accounts < 2 || o.viewers < 1 || o.follows < 1:
		return fmt.Errorf("-accounts (≥ 2), -viewers and -follows (≥ 1) must be positive")
	case o.follows > o.accounts:
		return fmt.Errorf("-follows %d is more than -accounts %d", o.follows, o.accounts)
	case o.clients < 1 || o.clients > 200:
		return fmt.Errorf("-clients must be from 1 to 200")
	case o.rate < 1 || o.readers < 1 || o.readRate < 1 || o.rounds < 1 || o.burstRate < 1 || o.burstConc < 1:
		return fmt.Errorf("-rate, -rounds, -readers, -read-rate, -burst-rate and -burst-concurrency must be positive")
	case o.phase < 100*time.Millisecond:
		return fmt.Errorf("-phase must be at least 100ms")
	}
	return nil
}
