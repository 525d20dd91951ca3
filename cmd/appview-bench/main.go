// Command appview-bench runs the appview daemon end to end against a local
// fake Jetstream serving a generated workload, and prints what issue 7
// asks to measure: ingest events/s per tenth of the stream, fan-out rows/s,
// getFeed latency and throughput from a separate client process while
// ingest runs at a throttled rate, peak RSS, and bytes per feed item.
//
// The default run is small (about half a minute). The full-size run:
//
//	go build -o /tmp/appview-bench ./cmd/appview-bench
//	/tmp/appview-bench -accounts 100000 -viewers 10000 -follows 200 -events 1000000 -read-duration 30s
//
// See docs/benchmarks.md for the figures and how to read them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/atfeeds/appview/workload/replay"
)

type options struct {
	accounts, viewers, follows, events int
	prefill                            int
	seed                               uint64
	compress                           bool
	phase                              string
	db                                 string
	dir                                string
	keep                               bool
	batchSize                          int
	readDuration, warmup               time.Duration
	readClients                        int
	readRate                           float64
	limit                              int
	cpuProfile, readCPUProfile         string
	memProfile                         string
	tenthProfiles                      string
	logLevel                           string
	registered                         bool
	writeProbe                         time.Duration
	firstReadProbe                     time.Duration
	firstReadClients                   int

	// client mode: the getFeed load generator, run as a child process
	client    bool
	target    string
	namespace string
}

func main() {
	var o options
	flag.IntVar(&o.accounts, "accounts", 10_000, "accounts in the workload")
	flag.IntVar(&o.viewers, "viewers", 1_000, "viewers: accounts that follow others (their feeds are kept)")
	flag.IntVar(&o.follows, "follows", 50, "mean follows per viewer in the seed graph")
	flag.IntVar(&o.events, "events", 100_000, "frames in the timed ingest stream")
	flag.IntVar(&o.prefill, "prefill", 0, "stream frames applied untimed with the seed graph, before the timed ones (enough fills the feeds to their caps first)")
	flag.Uint64Var(&o.seed, "seed", 1, "workload seed")
	flag.BoolVar(&o.compress, "compress", false, "ask for permessage-deflate (the fake server compresses in this process, so the cost shown is both sides')")
	flag.StringVar(&o.phase, "phase", "all", "ingest, read or all; read needs -db from an earlier ingest run with the same workload flags")
	flag.StringVar(&o.db, "db", "", "database path (default: a temporary file, removed at exit); kept when set")
	flag.StringVar(&o.dir, "dir", "", "directory for the frame logs and the temporary database (default: the system temp dir)")
	flag.BoolVar(&o.keep, "keep", false, "keep the frame logs and the temporary database")
	flag.BoolVar(&o.registered, "registered-viewers", false, "run the daemon as deployed by default, index_all off: the viewers are registered, their first reads done, before the seed graph, so only their follows and the posts of accounts they follow are stored (default: index_all, every post stored)")
	flag.DurationVar(&o.firstReadProbe, "first-read-probe", 0, "ask getFeed for a new viewer's first page this often during the timed ingest (50 follows on a loopback PDS) and print how long each answer took and how many were full (0: off; its writes cut the batches they wait on, so the ingest figures change)")
	flag.IntVar(&o.firstReadClients, "first-read-clients", 1, "with -first-read-probe: this many probes at once, each asking for a new viewer's first page at that interval (the admission's client_interval is lowered to let them all in)")
	flag.DurationVar(&o.writeProbe, "write-probe", 0, "register a new viewer this often during the timed ingest and print how long each registration took: the wait a first read's writes see behind a catch-up (0: off; it cuts the batches it waits on, so the ingest figures change)")
	flag.IntVar(&o.batchSize, "batch-size", 0, "override ingest.batch_size (default: the daemon's)")
	flag.DurationVar(&o.readDuration, "read-duration", 5*time.Second, "how long the getFeed clients measure")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "getFeed client warm-up before measuring")
	flag.IntVar(&o.readClients, "read-clients", 8, "concurrent getFeed clients")
	flag.Float64Var(&o.readRate, "read-rate", 1000, "ingest rate (events/s) while the clients read; 0 reads with no ingest")
	flag.IntVar(&o.limit, "limit", 50, "getFeed page size")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed ingest to this file")
	flag.StringVar(&o.tenthProfiles, "tenth-profiles", "", "write one CPU profile of the timed ingest per tenth into this directory (tenth01.prof … tenth10.prof; compare with pprof -diff_base); not with -cpuprofile")
	flag.StringVar(&o.memProfile, "memprofile", "", "write a heap profile (in use) to this file when the timed ingest reaches its fifth tenth, at full speed")
	flag.StringVar(&o.readCPUProfile, "read-cpuprofile", "", "write a CPU profile of the daemon during the read phase to this file (the client process is not in it)")
	flag.StringVar(&o.logLevel, "log-level", "error", "daemon log level (warnings are counted either way; the malformed frames make some)")
	flag.BoolVar(&o.client, "client", false, "run as the getFeed client process (used by the read phase)")
	flag.StringVar(&o.target, "target", "", "client mode: base URL of the daemon")
	flag.StringVar(&o.namespace, "namespace", "", "client mode: XRPC namespace")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if o.client {
		err = runClient(ctx, o, os.Stdout)
	} else {
		err = run(ctx, o, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "appview-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	// At least one probe client; tests build options without the flag.
	o.firstReadClients = max(o.firstReadClients, 1)
	switch o.phase {
	case "ingest", "read", "all":
	default:
		return fmt.Errorf("-phase: %q: want ingest, read or all", o.phase)
	}
	if o.phase == "read" {
		if o.db == "" {
			return errors.New("-phase read needs -db, the database of an earlier -phase ingest run")
		}
		if _, err := os.Stat(o.db); err != nil {
			return fmt.Errorf("-phase read: %w", err)
		}
	}
	if o.events < 10 {
		return errors.New("-events: must be at least 10")
	}
	if o.readRate != 0 && !replay.ValidRate(o.readRate) {
		return fmt.Errorf("-read-rate: %v: want 0 (no ingest while the clients read) or more", o.readRate)
	}
	if o.tenthProfiles != "" {
		if o.cpuProfile != "" {
			return errors.New("-tenth-profiles and -cpuprofile: one CPU profile at a time")
		}
		if o.phase == "read" {
			return errors.New("-tenth-profiles profiles the timed ingest, which -phase read does not run")
		}
		// Fail now, not after the seed phase.
		if err := os.MkdirAll(o.tenthProfiles, 0o755); err != nil {
			return fmt.Errorf("-tenth-profiles: %w", err)
		}
	}
	b, err := newBench(o, out)
	if err != nil {
		return err
	}
	defer b.cleanup()
	return b.run(ctx)
}
