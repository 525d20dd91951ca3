package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/workload"
	"github.com/atfeeds/appview/workload/replay"
)

// bench is one run: the workload, its frame logs, the fake Jetstream and
// the daemon under test, all in this process (the getFeed clients are not).
type bench struct {
	o      options
	out    io.Writer // the report
	w      *workload.Workload
	dir    string // frame logs, and the database unless -db
	tmpDir bool   // dir was created here and is removed at exit
	dbPath string

	playlist *replay.Playlist
	server   *replay.Server
	daemon   *appview.Daemon
	cfg      appview.Config
	base     string // http://host:port of the daemon
	logs     *logCounter
	stop     context.CancelFunc
	runErr   chan error

	gen    generated
	stream *workload.Stream // the main stream, positioned after the logged frames

	network *probeNetwork // the first-read probe's PLC and PDS, when it runs
}

func newBench(o options, out io.Writer) (*bench, error) {
	cfg := workload.DefaultConfig()
	cfg.Seed, cfg.Accounts, cfg.Viewers, cfg.Follows = o.seed, o.accounts, o.viewers, o.follows
	w, err := workload.New(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(o.dir, "appview-bench-")
	if err != nil {
		return nil, fmt.Errorf("make work dir: %w", err)
	}
	b := &bench{o: o, out: out, w: w, dir: dir, tmpDir: !o.keep, dbPath: o.db}
	if b.dbPath == "" {
		b.dbPath = filepath.Join(dir, "appview.db")
	}
	return b, nil
}

func (b *bench) cleanup() {
	if b.tmpDir {
		os.RemoveAll(b.dir)
	} else {
		fmt.Fprintf(b.out, "kept %s\n", b.dir)
	}
}

// tail is how many frames follow the timed ones in the main log, so that
// the last timed frame is committed by a full batch rather than by the
// batch timer after the stream goes quiet.
func (b *bench) tail() int { return 2 * b.daemonConfig().Ingest.BatchSize }

func (b *bench) run(ctx context.Context) error {
	fmt.Fprintf(b.out, "workload: %d accounts, %d viewers × %d follows (mean), %d events (after %d untimed), seed %d; compress=%v; GOMAXPROCS=%d\n",
		b.o.accounts, b.o.viewers, b.o.follows, b.o.events, b.o.prefill, b.o.seed, b.o.compress, numCPU())
	if b.o.phase == "read" {
		// Reuse the database of an earlier ingest run; the live stream
		// continues where that run's log ended.
		start := time.Now()
		b.stream = b.w.Stream()
		logged := b.o.prefill + b.o.events + b.tail()
		for range logged {
			b.stream.Next()
		}
		fmt.Fprintf(b.out, "skipped the %d logged frames in %.1fs\n", logged, time.Since(start).Seconds())
		if err := b.start(ctx, replay.NewPlaylist()); err != nil {
			return err
		}
		defer b.shutdown()
		if _, err := b.readPhase(ctx); err != nil {
			return err
		}
		return b.reportStorage(ctx)
	}

	if err := b.generate(); err != nil {
		return err
	}
	seed, err := os.Open(b.gen.seedPath)
	if err != nil {
		return err
	}
	defer seed.Close()
	if err := b.start(ctx, replay.NewPlaylist(replay.Log(seed))); err != nil {
		return err
	}
	defer b.shutdown()
	ingest, err := b.ingestPhase(ctx)
	if err != nil {
		return err
	}
	if err := b.reportStorage(ctx); err != nil {
		return err
	}
	if b.o.phase == "all" {
		if _, err := b.readPhase(ctx); err != nil {
			return err
		}
	}
	since := "since the seed phase ended"
	if ingest.peakNotReset != nil {
		since = "the seed phase included"
	}
	fmt.Fprintf(b.out, "\npeak RSS of the whole run (VmHWM %s): %.0f MiB\n", since, float64(procStatus("VmHWM"))/(1<<20))
	return nil
}

func (b *bench) daemonConfig() appview.Config {
	cfg := appview.DefaultConfig()
	// APPVIEW_ variables tune the daemon under test as they would the
	// real one (APPVIEW_DATABASE_CACHE_MB=128, …); what the bench sets
	// below wins.
	if _, err := appview.ApplyEnv(&cfg, os.Environ()); err != nil {
		fmt.Fprintf(b.out, "ignoring the environment: %v\n", err)
		cfg = appview.DefaultConfig()
	}
	cfg.Database.Path = b.dbPath
	cfg.Jetstream.Compression = b.o.compress
	cfg.Ingest.IndexAll = !b.o.registered
	if b.o.batchSize > 0 {
		cfg.Ingest.BatchSize = b.o.batchSize
	}
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Log.Level = b.o.logLevel
	// The fake Jetstream keeps the whole generated stream, dated from the
	// workload's start (2026-01-01 by default) however long ago that is:
	// its retention is unbounded. Left at the real upstream's window, a
	// daemon restarted on a kept database (-phase read) took its cursor's
	// age for a gap and sent every viewer back to a first read from PDSes
	// the bench does not run.
	cfg.Jetstream.RetentionWindow = time.Since(time.Unix(0, 0))
	// The fake Jetstream sends every phase in time_us order, so a
	// reconnect (the daemon steps away while a catch-up batch holds its
	// queue full) needs no rewind for events sent out of order, as a v2
	// server, resuming by sequence number, needs none. The default 5 s
	// reaches millions of frames back into the seed graph, whose follows
	// are 1 µs apart, past what the server keeps for a replay: a gap.
	cfg.Jetstream.Rewind = time.Millisecond
	return cfg
}

// start runs the fake Jetstream on playlist and the daemon against it.
func (b *bench) start(ctx context.Context, playlist *replay.Playlist) error {
	level := slog.LevelWarn
	if err := level.UnmarshalText([]byte(b.o.logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	b.logs = newLogCounter(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	logger := slog.New(b.logs)

	b.playlist = playlist
	srv, err := replay.NewServer(playlist, logger)
	if err != nil {
		return fmt.Errorf("start fake jetstream: %w", err)
	}
	b.server = srv
	b.cfg = b.daemonConfig()
	b.cfg.Jetstream.URLs = []string{srv.URL()}
	if b.o.firstReadProbe > 0 {
		b.network = newProbeNetwork(b.o.accounts, rand.New(rand.NewPCG(b.o.seed, 7)), time.Now())
		b.network.configure(&b.cfg)
		// The probes all come from 127.0.0.1, one admission client:
		// its pace must let every probe's viewers in, or they get 429.
		// Their first asks come at once: the bucket holds one for each.
		adm := &b.cfg.Backfill.Admission
		clients := b.o.firstReadClients
		if pace := b.o.firstReadProbe / time.Duration(2*clients); pace < adm.ClientInterval {
			adm.ClientInterval = max(pace, time.Millisecond)
			fmt.Fprintf(b.out, "first-read probe: %d client(s), one every %s each; backfill.admission.client_interval lowered to %s\n",
				clients, b.o.firstReadProbe, adm.ClientInterval)
		}
		if clients > adm.ClientBurst {
			adm.ClientBurst = clients
			fmt.Fprintf(b.out, "first-read probe: backfill.admission.client_burst raised to %d\n", clients)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d, err := appview.Build(ctx, b.cfg, appview.Options{Logger: logger, Listener: l})
	if err != nil {
		l.Close()
		return fmt.Errorf("build daemon: %w", err)
	}
	b.daemon = d
	b.base = "http://" + d.Addr().String()
	if b.o.registered && b.o.phase != "read" {
		if err := b.registerViewers(ctx); err != nil {
			return err
		}
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = stop
	b.runErr = make(chan error, 1)
	go func() { b.runErr <- d.Run(runCtx) }()
	return nil
}

// shutdown stops the daemon as `appview serve` does, then the server.
func (b *bench) shutdown() {
	if b.daemon == nil {
		return
	}
	b.stop()
	select {
	case err := <-b.runErr:
		if err != nil {
			fmt.Fprintln(os.Stderr, "daemon run:", err)
		}
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "daemon did not stop within 30s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := b.daemon.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "daemon close:", err)
	}
	b.server.Close()
	if b.network != nil {
		b.network.close()
		b.network = nil
	}
	b.daemon = nil
}

// errDaemonStopped is returned when the daemon's Run ends during a phase.
var errDaemonStopped = errors.New("daemon stopped")

// waitCursor polls the committed cursor every few milliseconds until it
// reaches timeUS, calling tick with each reading. It fails if the daemon
// stops or the cursor does not move for a minute.
func (b *bench) waitCursor(ctx context.Context, timeUS int64, tick func(cursor int64)) error {
	last, moved := int64(0), time.Now()
	for {
		c := b.daemon.Store().Cursor().TimeUS
		if tick != nil {
			tick(c)
		}
		if c >= timeUS {
			return nil
		}
		if c != last {
			last, moved = c, time.Now()
		} else if time.Since(moved) > time.Minute {
			return fmt.Errorf("cursor stuck at %d for a minute (want %d)", c, timeUS)
		}
		select {
		case err := <-b.runErr:
			b.daemon = nil
			return fmt.Errorf("%w: %v", errDaemonStopped, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
