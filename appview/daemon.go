package appview

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/atfeeds/appview/backfill"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
	"github.com/atfeeds/appview/pds"
	"github.com/atfeeds/appview/profiles"
	"github.com/atfeeds/appview/xrpc"
)

// Version is the daemon's version, set at build time with
// -ldflags "-X github.com/atfeeds/appview/appview.Version=…".
var Version = "dev"

// Options are the parts of Build a caller may supply instead of the
// defaults; tests use them to bind 127.0.0.1:0 and read the port back.
type Options struct {
	Logger *slog.Logger
	// Listener, when set, is served instead of listening on HTTP.Listen.
	// A successful Build takes it over, as it does the listeners it
	// opens: Run closes it at shutdown, or Close does if Run never ran.
	// A failed Build leaves it to the caller.
	Listener net.Listener
}

// Daemon is the running appview: the Jetstream consumer, the ingester that
// writes batches, and the XRPC server, over one Store.
type Daemon struct {
	cfg      Config
	log      *slog.Logger
	lock     *daemonLock // held from Build to Close
	store    *feeds.Store
	consumer *jetstream.Client
	sessions *sessionLog
	ingest   *ingester
	backfill *backfill.Service
	profiles *profiles.Service // nil when profile hydration is off
	server   *xrpc.Server
	status   *statusPage
	listener net.Listener
	gaps     prometheus.Counter
	now      func() time.Time

	// admin serves /metrics and /status on adminListener when
	// http.admin_listen is set; both are nil otherwise.
	admin         *xrpc.Server
	adminListener net.Listener
}

// Build opens the database and constructs every part; nothing runs until
// Run. On error everything opened so far is closed.
func Build(ctx context.Context, cfg Config, opts Options) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := newRegistry(Version)

	storeFeeds, specs := feedDefinitions(cfg)
	storeOpts := feeds.Options{
		Path:          cfg.Database.Path,
		CacheMB:       cfg.Database.CacheMB,
		ReadMmapMB:    cfg.Database.ReadMmapMB,
		RecordCacheMB: cfg.Database.RecordCacheMB,
		Feeds:         storeFeeds,
		Logger:        log,
		Metrics:       feeds.NewMetrics(reg),
		IndexAll:      cfg.Ingest.IndexAll,
		Profiles:      cfg.Hydration.Profiles,
		Sweep: feeds.SweepOptions{
			Actors:           cfg.Sweep.Actors,
			BatchEvents:      cfg.Ingest.BatchSize,
			RecoveryInterval: cfg.Sweep.RecoveryInterval,
			Retention:        cfg.Sweep.Retention,
			TombstoneWindow:  cfg.Sweep.TombstoneWindow,
		},
	}
	lock, err := lockDaemon(cfg.Database.Path)
	if err != nil {
		return nil, err
	}
	built := false
	defer func() {
		if !built {
			lock.release()
		}
	}()
	reservePageSlab(log, storeOpts.PageCacheMB())
	setGoLimit(log, cfg)
	store, err := openWaitingOutForeignLocks(ctx, storeOpts, log)
	if err != nil {
		return nil, err
	}
	registerLag(reg, store, time.Now)
	reg.MustRegister(newPageSlabCollector())
	if change, err := store.CheckScope(ctx, cfg.WantedCollections()); err != nil {
		store.Close()
		return nil, err
	} else if change != nil {
		log.Warn("cursor_scope_changed", "component", "daemon", "added", change.Added, "removed", change.Removed,
			"action", "live position kept; viewers of feeds that gained a target rebuild at their next read")
	}
	gaps := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "appview", Subsystem: "jetstream", Name: "gaps_total",
		Help: "Reconnects whose stored cursor was older than the upstream retention window: events were missed.",
	})
	reg.MustRegister(gaps)

	var follows []syntax.NSID
	for _, c := range cfg.FollowCollections() {
		follows = append(follows, syntax.NSID(c))
	}
	wanted := cfg.WantedCollections()
	sessions := newSessionLog(store, log.With("component", "jetstream"))
	consumer := jetstream.NewClient(jetstream.Config{
		URLs:              cfg.Jetstream.URLs,
		WantedCollections: wanted,
		Rewind:            cfg.Jetstream.Rewind,
		Compression:       cfg.Jetstream.Compression,
		MaxFrameBytes:     cfg.Jetstream.MaxFrameBytes,
		ReadTimeout:       cfg.Jetstream.ReadTimeout,
		IdleTimeout:       cfg.Jetstream.IdleTimeout,
		UserAgent:         "atfeeds-appview/" + Version,
		OnSessionEnd:      sessions.add,
		QueueBytes:        queueBytes,
	}, jetstream.NewDecoder(jetstream.DecoderConfig{FollowCollections: follows}), log, jetstream.NewMetrics(reg, wanted))

	// One list of rate-limited PDS hosts for every service that asks
	// PDSes: a host that answered 429 to one of them is asked by none
	// until its pause ends (pds.HostPauses).
	paused := pds.NewHostPauses()
	dir, firstReads := buildBackfill(cfg, store, paused, reg, log)
	// A gap (found at a reconnect, or recorded by an operator's reset)
	// lost the identity events that purge the directory's cache one by
	// one.
	store.OnGap(dir.PurgeAll)
	xcfg := xrpc.Config{
		Namespace:     cfg.XRPC.Namespace,
		HandleLookups: cfg.XRPC.HandleLookups.limits(),
		Feeds:         specs,
		Reader:        store,
		Actors:        handleResolver{dir},
		Version:       Version,
		Metrics:       promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Logger:        log,
		Registerer:    reg,
		Ready:         newReadiness(reg, len(wanted) > 0).Check,
	}
	xcfg.TrustedProxies = cfg.HTTP.trustedProxies()
	if !cfg.Ingest.IndexAll {
		xcfg.Viewers = firstReads
	}
	hydration := buildProfiles(cfg, store, dir, paused, reg, log)
	if hydration != nil {
		xcfg.Profiles = hydration
	}
	wireNotify(&xcfg, cfg, store, dir, paused, reg, log, firstReads.FollowsCreated)
	status := newStatusPage(store, Version, log, time.Now)
	xcfg.Status = status.Status
	admin := splitAdmin(cfg, &xcfg, log)
	server := xrpc.NewServer(xcfg)

	listener := opts.Listener
	if listener == nil {
		listener, err = net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("listen on %s: %w", cfg.HTTP.Listen, err)
		}
	}
	adminListener, err := listenAdmin(cfg)
	if err != nil {
		if opts.Listener == nil {
			listener.Close()
		}
		store.Close()
		return nil, err
	}
	ingest := &ingester{
		store:         store,
		batchSize:     cfg.Ingest.BatchSize,
		catchupSize:   cfg.Ingest.CatchupBatchSize,
		partSize:      catchupPartSize,
		partTime:      catchupPartTime,
		batchInterval: cfg.Ingest.BatchInterval,
		maxInterval:   cfg.Ingest.MaxBatchInterval,
		log:           log.With("component", "ingest"),
		afterCommit: func(res feeds.BatchResult) {
			if len(res.NewFollows) > 0 {
				firstReads.FollowsCreated(res.NewFollows)
			}
			if len(res.Restored) > 0 {
				firstReads.ForgetViewers(res.Restored)
			}
		},
		identityChanged: dir.PurgeIdentity,
		restart:         consumer.Restart,
		consumed:        consumer.Consumed,
		sweepIdle:       cfg.Sweep.IdleInterval,
		now:             time.Now,
	}
	registerBatchInterval(reg, ingest)
	registerBatchCuts(reg, ingest)
	built = true
	return &Daemon{
		cfg:           cfg,
		log:           log.With("component", "daemon"),
		lock:          lock,
		store:         store,
		consumer:      consumer,
		sessions:      sessions,
		backfill:      firstReads,
		profiles:      hydration,
		ingest:        ingest,
		server:        server,
		status:        status,
		listener:      listener,
		admin:         admin,
		adminListener: adminListener,
		gaps:          gaps,
		now:           time.Now,
	}, nil
}

// openRetryPause is the pause between tries of a start behind another
// process's write lock.
const openRetryPause = time.Second

// openWaitingOutForeignLocks opens the daemon's store, trying again while
// another process (an operator command beside the daemon) holds the write
// lock past the busy timeout: a restart during a long rebuild chunk would
// otherwise fail with "database is locked". A try that gave up is what a
// failed start was, and the next try opens again as the next start would.
// A stop while it waits returns ctx's error: a stop before the daemon
// started.
func openWaitingOutForeignLocks(ctx context.Context, opts feeds.Options, log *slog.Logger) (*feeds.Store, error) {
	for attempt := 1; ; attempt++ {
		store, err := openMigratingUnlessOperated(ctx, opts)
		if !errors.Is(err, feeds.ErrWriteBusy) {
			return store, err
		}
		log.Warn("database open waits: another process holds the database's write lock", "attempt", attempt, "err", err)
		// Each try waits out SQLite's busy timeout; the pause keeps a
		// busy answer given at once from spinning.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(openRetryPause):
		}
	}
}

// openMigratingUnlessOperated is one try at opening the daemon's store,
// migrating its schema only when no operator command has the database
// open (the operator lock): with one open, a database at an older schema
// is refused, naming the reason, rather than changed under the command.
// The lock is held for this try only, so that the commands started while
// a start waits out a foreign write lock are not refused all that time.
func openMigratingUnlessOperated(ctx context.Context, opts feeds.Options) (*feeds.Store, error) {
	ops, held, err := lockOperatorsOut(opts.Path)
	if err != nil {
		return nil, err
	}
	defer ops.release()
	opts.KeepSchema = !held
	store, err := feeds.Open(ctx, opts)
	if errors.Is(err, feeds.ErrSchemaBehind) && !held {
		return nil, fmt.Errorf("%w, so its schema cannot be migrated now: let it finish, then start the daemon again (%w)", errOperatorCommandRunning, err)
	}
	return store, err
}

// feedDefinitions translates the validated config into the store's feeds
// and the server's feed specs.
func feedDefinitions(cfg Config) ([]feeds.Feed, []xrpc.FeedSpec) {
	var out []feeds.Feed
	var specs []xrpc.FeedSpec
	for _, f := range cfg.Feeds {
		feed := feeds.Feed{Name: f.Name, FollowCollection: syntax.NSID(f.FollowCollection), MergeLimit: f.MergeLimit}
		spec := xrpc.FeedSpec{Name: f.Name, Fields: map[syntax.NSID][]feeds.Field{}}
		for _, t := range f.Targets {
			coll := syntax.NSID(t.Collection)
			var fields []feeds.Field
			for _, fc := range t.Fields {
				fields = append(fields, feeds.Field{Name: fc.Name, Path: fc.Path, Kind: fc.StoreKind()})
			}
			feed.Targets = append(feed.Targets, feeds.Target{Collection: coll, Cap: t.Cap, Fields: fields})
			spec.Collections = append(spec.Collections, coll)
			spec.Fields[coll] = fields
		}
		out = append(out, feed)
		specs = append(specs, spec)
	}
	return out, specs
}

// Addr is the address the XRPC server listens on.
func (d *Daemon) Addr() net.Addr { return d.listener.Addr() }

// AdminAddr is the address the admin server (/metrics, /status) listens
// on, or nil when http.admin_listen is off and Addr serves them.
func (d *Daemon) AdminAddr() net.Addr {
	if d.adminListener == nil {
		return nil
	}
	return d.adminListener.Addr()
}

// Store exposes the database, for commands and tests.
func (d *Daemon) Store() *feeds.Store { return d.store }

// Run runs the consumer, the ingester and the server until ctx ends or one
// of them fails. A cancelled ctx is a clean exit: the ingester commits its
// last batch with its cursor before Run returns.
func (d *Daemon) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	events := make(chan jetstream.Event, d.cfg.Jetstream.QueueSize)

	g.Go(func() error { d.sessions.Run(); return nil })
	if len(d.cfg.WantedCollections()) == 0 {
		// An empty wantedCollections asks Jetstream for everything; with no
		// feeds there is nothing to consume.
		d.log.Info("no feeds configured: not subscribing to jetstream")
		d.sessions.close()
	} else {
		g.Go(func() error {
			defer d.sessions.close()
			resume := func() jetstream.Position { return d.resumePosition(gctx) }
			return named("jetstream", d.consumer.Run(gctx, resume, events))
		})
	}
	g.Go(func() error { return named("ingest", d.ingest.Run(gctx, events)) })
	g.Go(func() error { return named("backfill", d.backfill.Run(gctx)) })
	if d.profiles != nil {
		g.Go(func() error { return named("profiles", d.profiles.Run(gctx)) })
	}
	g.Go(func() error { return named("status", d.status.Run(gctx)) })
	if d.cfg.Ingest.IndexAll {
		g.Go(func() error { d.finishRebuilds(gctx); return nil })
	}
	serveHTTP(g, gctx, "http", d.server, d.listener)
	admin := d.listener.Addr() // /metrics and /status beside XRPC
	if d.admin != nil {
		serveHTTP(g, gctx, "admin http", d.admin, d.adminListener)
		admin = d.adminListener.Addr()
	}
	d.log.Info("appview running", "listen", d.listener.Addr().String(), "admin_endpoints", admin.String(),
		"database", d.cfg.Database.Path, "jetstream", d.cfg.Jetstream.URLs[0], "feeds", len(d.cfg.Feeds))
	err := g.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// resumePosition is the consumer's view of the last committed cursor,
// asked at every (re)connect. A cursor older than the upstream keeps is a
// gap: the events in between are gone from the stream, so it is recorded
// and every viewer is rebuilt from the PDSes at its next read.
func (d *Daemon) resumePosition(ctx context.Context) jetstream.Position {
	c := d.store.Cursor()
	if c.TimeUS > 0 {
		age := d.now().Sub(time.UnixMicro(c.TimeUS))
		if window := d.cfg.Jetstream.RetentionWindow; age > window {
			recorded, err := d.recordGap(ctx, feeds.Gap{Detected: d.now(), CursorUS: c.TimeUS, Size: age - window})
			switch {
			case err != nil:
				d.log.Error("record stream gap", "err", err)
			case recorded:
				d.gaps.Inc()
				d.log.Warn("stream_gap", "cursor_time_us", c.TimeUS, "gap", (age - window).Round(time.Second),
					"action", "viewers rebuild from their PDSes at their next read")
			}
		}
	}
	return jetstream.Position{TimeUS: c.TimeUS, Seq: c.Seq, Host: c.Host}
}

// finishRebuilds runs, in index_all mode, the feed rebuilds left
// unfinished: those queued when a feed gained a target (no first read
// rebuilds a viewer in that mode), and an operator's interrupted one. Each
// resumes from its stored position, a chunk of viewers a transaction,
// beside the ingest; a failure is logged and the rebuild left for the
// next start.
func (d *Daemon) finishRebuilds(ctx context.Context) {
	pending, err := d.store.UnfinishedRebuilds(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("read unfinished rebuilds", "err", err)
		}
		return
	}
	for _, p := range pending {
		d.log.Info("rebuilding feed", "feed", p.Feed, "resumed_after_viewer", p.AfterViewer)
		res, err := d.store.RebuildFeed(ctx, p.Feed, feeds.RebuildOptions{})
		if errors.Is(err, feeds.ErrUnknownLane) {
			d.log.Warn("an unfinished rebuild names a feed no longer configured", "feed", p.Feed)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				d.log.Error("rebuild feed", "feed", p.Feed, "err", err)
			}
			return
		}
		d.log.Info("feed rebuilt", "feed", p.Feed, "viewers", res.Done, "rows", res.Rows)
	}
}

// recordGap records a gap, waiting out a write lock another process holds
// (an operator command): the consumer connects from the stale cursor right
// after, and the first batch then stores a fresh one, so a gap not
// recorded now is never seen again, and no viewer is rebuilt
// (TestAGapIsRecordedThoughTheWriteLockIsHeldAtConnect). It gives up
// only when the daemon stops, before anything newer is stored. The write
// sets no deadline: a deadline also ran while it waited for the daemon's
// own writer, so behind a catch-up batch longer than it the gap went
// unrecorded, as a session record once did (found by a review). The wait
// costs the stream nothing, the consumer not being connected yet, and
// another process's lock still fails each try after the busy timeout.
func (d *Daemon) recordGap(ctx context.Context, g feeds.Gap) (recorded bool, err error) {
	err = retryWhileBusy(ctx.Done(), 1, d.log, "stream gap", func() error {
		recorded, err = d.store.RecordGap(context.WithoutCancel(ctx), g)
		return err
	})
	return recorded, err
}

// Close closes the listeners, checkpoints and closes the database, and
// releases its lock. Call it after Run has returned; ctx bounds the
// checkpoint. Run's servers close the listeners when they stop, so after
// Run they are found closed; a daemon built but never run (a caller that
// gives up after Build, a test) would otherwise keep its ports bound
// until the process exits.
func (d *Daemon) Close(ctx context.Context) error {
	return errors.Join(closeListener(d.listener), closeListener(d.adminListener),
		d.store.Checkpoint(ctx), d.store.Close(), d.lock.release())
}

// closeListener closes l, if any; one already closed (by Run's server,
// or by the caller that gave it in Options.Listener) is not an error.
func closeListener(l net.Listener) error {
	if l == nil {
		return nil
	}
	if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

func named(part string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%s: %w", part, err)
}

// OpenStore opens the configured database for an operator command, next
// to a daemon that may be running on it. The database must exist: a
// command given the daemon's config from another working directory (the
// default database.path is relative) would otherwise create an empty
// file there, report nothing stored and exit 0, or fill the wrong file.
func OpenStore(ctx context.Context, cfg Config) (*feeds.Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if err := mustExist(cfg); err != nil {
		return nil, err
	}
	lock, err := lockAsOperator(ctx, cfg.Database.Path, operatorLockWait)
	if err != nil {
		return nil, err
	}
	return lock.untilClosed(openStore(ctx, cfg))
}

// MigrateStore brings the configured database to this build's schema
// (appview migrate), and returns the versions before and after. The
// other operator commands refuse an older schema (feeds.ErrSchemaBehind).
func MigrateStore(ctx context.Context, cfg Config) (from, to int, err error) {
	if err := cfg.Validate(); err != nil {
		return 0, 0, fmt.Errorf("invalid config: %w", err)
	}
	if err := mustExist(cfg); err != nil {
		return 0, 0, err
	}
	// A daemon of the build being replaced must be stopped first: the
	// schema would change under it.
	lock, err := lockDaemon(cfg.Database.Path)
	if err != nil {
		return 0, 0, err
	}
	defer lock.release()
	// So must an operator command: it opened the database at the schema
	// it knows.
	ops, held, err := lockOperatorsOut(cfg.Database.Path)
	if err != nil {
		return 0, 0, err
	}
	if !held {
		return 0, 0, fmt.Errorf("%w: let it finish, then migrate", errOperatorCommandRunning)
	}
	defer ops.release()
	return feeds.Migrate(ctx, cfg.Database.Path)
}

// mustExist fails, saying what to check, when the configured database
// does not exist: an operator command does not make one.
func mustExist(cfg Config) error {
	if _, err := os.Stat(cfg.Database.Path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no database at %s: give the command the daemon's config and run it where the daemon runs (a relative database.path is read from the working directory)", DatabasePath(cfg))
	}
	return nil
}

// OpenOrCreateStore is OpenStore for a command that may prepare a
// database the daemon has not run on yet (appview backfill); created says
// it made the file, which the command should say.
func OpenOrCreateStore(ctx context.Context, cfg Config) (store *feeds.Store, created bool, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, false, fmt.Errorf("invalid config: %w", err)
	}
	_, err = os.Stat(cfg.Database.Path)
	created = errors.Is(err, fs.ErrNotExist)
	if created {
		// Made here, not by SQLite, whose error for a file it cannot make
		// ("unable to open database file") names neither the file nor
		// the reason (a missing or read-only directory). SQLite takes an
		// empty file for a new database.
		f, err := os.OpenFile(cfg.Database.Path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		switch {
		case err == nil:
			f.Close()
		case !errors.Is(err, fs.ErrExist): // made meanwhile: open it
			return nil, false, fmt.Errorf("create database: %w", err)
		}
	}
	lock, err := lockAsOperator(ctx, cfg.Database.Path, operatorLockWait)
	if err != nil {
		return nil, false, err
	}
	store, err = lock.untilClosed(openStore(ctx, cfg))
	return store, created, err
}

// DatabasePath is the configured database's absolute path, as far as it
// can be told.
func DatabasePath(cfg Config) string {
	if abs, err := filepath.Abs(cfg.Database.Path); err == nil {
		return abs
	}
	return cfg.Database.Path
}

func openStore(ctx context.Context, cfg Config) (*feeds.Store, error) {
	storeFeeds, _ := feedDefinitions(cfg)
	return feeds.Open(ctx, feeds.Options{Path: cfg.Database.Path, Feeds: storeFeeds, IndexAll: cfg.Ingest.IndexAll,
		Profiles: cfg.Hydration.Profiles, ReadConns: 1, Existing: true})
}
