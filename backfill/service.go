// Package backfill runs the first read: the first time a viewer's feed is
// read, it fetches the viewer's follow records from their own PDS, makes
// sure the recent targets of every account they follow are stored (each
// account fetched once, whoever needed it first), and builds the feed, so
// that the first page is already full. It also fetches the backlog of
// accounts a viewer starts following later.
//
// Everything here talks to strangers: every request is bounded (package
// pds), every failure is recorded with a retry schedule, and a failed
// account never fails the viewer's first read.
package backfill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"golang.org/x/sync/errgroup"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds"
)

// Config bounds the backfill. Zero values take the defaults noted.
type Config struct {
	// FirstReadWait is how long getFeed waits for a first read before it
	// answers with what is there (default 3s); the run goes on.
	FirstReadWait time.Duration
	// Depth is how many of an account's newest records per target
	// collection are fetched (default 50).
	Depth int
	// MaxFollows bounds the follow records listed for one viewer (default
	// 10,000).
	MaxFollows int
	// Concurrency bounds PDS requests in flight overall (default 16) and
	// PerHost per PDS host (default 4).
	Concurrency, PerHost int
	// MaxAttempts bounds first-read attempts of a viewer and listing
	// attempts of an account (default 6).
	MaxAttempts int
	// Lease is how long a first-read claim holds before another run may
	// take it over (default 2m).
	Lease time.Duration
	// RunTimeout bounds one first read started by a getFeed request, from
	// its claim to the built feed (default three quarters of Lease): a PDS
	// answering just inside every request timeout must not hold a running
	// slot for minutes. A run cut off is retried on the schedule,
	// resuming from its stored listing cursors; it counts an attempt
	// only if it stored no page (or a process has spared the viewer 8
	// such runs already), so a viewer whose runs keep advancing is not
	// given up on early. A run queued for a running place waits at
	// most as long again, uncharged.
	RunTimeout time.Duration
	// RetryBase and RetryMax shape the retry schedule (default 1m, 48h).
	RetryBase, RetryMax time.Duration
	// QueueSize bounds the followee backfills waiting to run (default 10,000).
	QueueSize int
	// ViewerTTL retires viewers who have not read for this long (default
	// 30 days); their next read is a first read again.
	ViewerTTL time.Duration
	// Admission bounds first reads an outsider can trigger.
	Admission AdmissionConfig
	// HostPauses holds the PDS hosts that answered 429 (default a list
	// of the service's own). The daemon passes the one its other PDS
	// clients use, so a host that rate limited any of them is asked by
	// none until its pause ends.
	HostPauses *pds.HostPauses
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur(&c.FirstReadWait, 3*time.Second)
	def(&c.Depth, 50)
	def(&c.MaxFollows, 10_000)
	def(&c.Concurrency, 16)
	def(&c.PerHost, 4)
	def(&c.MaxAttempts, 6)
	defDur(&c.Lease, 2*time.Minute)
	defDur(&c.RunTimeout, c.Lease*3/4)
	defDur(&c.RetryBase, time.Minute)
	defDur(&c.RetryMax, 48*time.Hour)
	def(&c.QueueSize, 10_000)
	defDur(&c.ViewerTTL, 30*24*time.Hour)
	if c.HostPauses == nil {
		c.HostPauses = pds.NewHostPauses()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Feed is what the backfill needs to know of a configured feed.
type Feed struct {
	Name             string
	FollowCollection syntax.NSID
	Targets          []syntax.NSID
}

// Resolver finds an account's PDS.
type Resolver interface {
	LookupDID(ctx context.Context, did syntax.DID) (*directory.Identity, error)
}

// Service runs first reads and followee backfills.
type Service struct {
	cfg      Config
	store    *feeds.Store
	resolver Resolver
	pds      *pds.Client
	feeds    map[string]Feed
	log      *slog.Logger
	metrics  *Metrics
	// owner names this process in first-read claims.
	owner string
	// renew is the store's RenewFirstRead, which holdClaim calls; a test
	// makes one renewal fail.
	renew func(ctx context.Context, viewer syntax.DID, feed, owner string, now time.Time, lease time.Duration) (bool, error)
	// joined, when set, hears each caller that joins a fetch already
	// running (ensureAccount): tests wait on it to reach the join point
	// instead of sleeping. Nil outside tests.
	joined func(accountKey)
	limits *pds.Limiter
	admit  *admission

	mu       sync.Mutex
	complete viewerMemo // complete viewers → when registration was last refreshed
	// forgets counts forgetComplete's calls: a viewer found complete in
	// the database before one is not remembered after it
	// (markComplete), or a gap's rebuild would wait out the hour.
	forgets uint64
	// notDue holds viewers whose first read failed and is not due again
	// before the time given: their reads are served from memory, without
	// the registration write that would queue with ingest for the lock.
	notDue   viewerMemo
	running  map[viewerKey]*firstRead
	accounts map[accountKey]*accountRun
	// sparedCutOffs counts, for each viewer, the runs cut off after
	// progress that this process counted no attempt for, up to
	// maxSparedCutOffs (spareCutOff).
	sparedCutOffs    map[viewerKey]int
	maxSparedCutOffs int
	// paused holds PDS hosts that answered 429, until when
	// (Config.HostPauses).
	paused *pds.HostPauses

	// runs tracks the first reads started in the background (start), so
	// Run returns only once they gave their claims back; stopping (under
	// mu) refuses new ones meanwhile.
	runs     sync.WaitGroup
	stopping bool

	queue chan feeds.FollowEdge
	// touches are complete viewers' last reads, waiting for writeTouches.
	touches chan feeds.ViewerTouch
	// bg is the daemon's lifetime: background runs outlive the request
	// that started them. It exists from New, since getFeed may start a
	// first read before Run, and ends when Run's context does
	// (TestAFirstReadStartedBeforeRunEndsWithRun).
	bg     context.Context
	stopBG context.CancelFunc
}

type viewerKey struct {
	viewer syntax.DID
	feed   string
}

type accountKey struct {
	account    syntax.DID
	collection syntax.NSID
}

// firstReadStopWait bounds Run's wait for the first reads running when it
// stops.
const firstReadStopWait = 10 * time.Second

// ErrStopping refuses a first read asked for while the service stops.
var ErrStopping = errors.New("first reads: the service is stopping")

// New builds a Service; call Run to start its background workers.
func New(cfg Config, store *feeds.Store, resolver Resolver, client *pds.Client, fs []Feed, log *slog.Logger, m *Metrics) *Service {
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &Service{
		cfg: cfg, store: store, resolver: resolver, pds: client,
		feeds:    map[string]Feed{},
		log:      log.With("component", "backfill"),
		metrics:  m,
		owner:    hex.EncodeToString(b[:]),
		renew:    store.RenewFirstRead,
		limits:   pds.NewLimiter(cfg.Concurrency, cfg.PerHost),
		admit:    newAdmission(cfg.Admission),
		complete: newViewerMemo(maxComplete),
		notDue:   newViewerMemo(maxNotDue),
		running:  map[viewerKey]*firstRead{},
		accounts: map[accountKey]*accountRun{},

		sparedCutOffs:    map[viewerKey]int{},
		maxSparedCutOffs: defaultSparedCutOffs,
		paused:           cfg.HostPauses,
		queue:            make(chan feeds.FollowEdge, cfg.QueueSize),
		touches:          make(chan feeds.ViewerTouch, touchQueueSize),
	}
	s.bg, s.stopBG = context.WithCancel(context.Background())
	for _, f := range fs {
		s.feeds[f.Name] = f
	}
	// A gap marks every complete viewer for a rebuild at its next read;
	// this process's memory of them would answer that read for up to an
	// hour without one.
	store.OnGap(s.forgetComplete)
	return s
}

// Run serves the followee backfill queue until ctx ends. First reads
// started by requests also stop when ctx ends.
func (s *Service) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, s.stopBG)
	defer stop()
	var wg sync.WaitGroup
	for _, loop := range []struct {
		interval time.Duration
		run      func(context.Context)
	}{
		{time.Minute, s.retireStale},
		{viewerRefreshInterval, s.refreshViewers},
		{time.Minute, s.retryDue},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every(ctx, loop.interval, func() { loop.run(ctx) })
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.writeTouches(ctx)
	}()
	for range max(1, s.cfg.Concurrency/4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case e := <-s.queue:
					s.metrics.queueDepth(len(s.queue))
					s.followeeBackfill(ctx, e)
				}
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	// The first reads running end with ctx, each giving its claim back
	// (runFirstRead): waited for, so the store is not closed under them
	// and a restarted daemon does not find its viewers claimed for a
	// lease. Bounded: a release takes 5 s at most.
	ended := make(chan struct{})
	go func() { s.runs.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(firstReadStopWait):
		s.log.Warn("first reads still running at shutdown", "waited", firstReadStopWait)
	}
	return nil
}

// viewerRefreshInterval is how soon the daemon learns of viewers an
// operator command registered beside it (appview backfill), which it
// would otherwise take for new ones, charged to their client's bucket.
const viewerRefreshInterval = 5 * time.Second

// every runs fn each interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// refreshViewers reloads the in-memory viewer set when another process
// changed the viewers (feeds.Store.RefreshViewers).
func (s *Service) refreshViewers(ctx context.Context) {
	reloaded, err := s.store.RefreshViewers(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("refresh viewers", "err", err)
	case reloaded:
		s.log.Info("viewers changed by another process: reloaded")
	}
}

// retireStale retires stale viewers in bounded slices.
func (s *Service) retireStale(ctx context.Context) {
	const slice = 100
	for {
		n, err := s.store.RetireViewers(ctx, s.cfg.Now(), s.cfg.ViewerTTL, slice)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("retire viewers", "err", err)
			}
			return
		}
		if n > 0 {
			s.log.Info("retired stale viewers", "count", n)
			s.forgetComplete()
		}
		if n < slice {
			return
		}
	}
}

// retryDue retries failed account listings on their schedule (backoff
// up to RetryMax, at most MaxAttempts), then merges what they fetched into
// the followers' feeds, whose first reads completed without it.
func (s *Service) retryDue(ctx context.Context) {
	due, err := s.store.DueListings(ctx, s.cfg.Now(), s.cfg.MaxAttempts, 100)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("find due listings", "err", err)
		}
		return
	}
	// Side by side, as many as the followee backfill runs: one PDS that
	// hangs for its request timeout must not hold back every retry behind
	// it (TestARetryThatHangsDoesNotHoldBackTheOthers). The per-host and
	// global request limits still bound what reaches the PDSes.
	var g errgroup.Group
	g.SetLimit(max(1, s.cfg.Concurrency/4))
	for _, k := range due {
		g.Go(func() error {
			if err := s.ensureAccount(ctx, k.Account, k.Collection); err != nil {
				return nil // recorded on the listing with its next retry
			}
			if _, err := s.store.MergeAuthor(ctx, k.Account); err != nil && ctx.Err() == nil {
				s.log.Error("merge retried account", "err", err)
			}
			return nil
		})
	}
	g.Wait()
}

// forgetComplete drops the in-memory record of complete viewers, so the
// next read of a retired one asks the database again.
func (s *Service) forgetComplete() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgets++
	s.complete.clear()
	s.notDue.clear()
}

// ForgetViewers drops what this process remembers of the accounts' first
// reads (complete, or failed and not due), in every feed, so the next read
// of each asks the database: an account restored after its deletion is
// due a first read again (feeds.BatchResult.Restored).
func (s *Service) ForgetViewers(accounts []syntax.DID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgets++ // a read that found one complete before the commit
	for _, a := range accounts {
		for feed := range s.feeds {
			s.complete.delete(viewerKey{a, feed})
			s.notDue.delete(viewerKey{a, feed})
		}
	}
}

// FollowsCreated queues the backlog fetch of accounts viewers started
// following on the live stream. A full queue drops the edge and counts
// it: the account's listing stays incomplete, so the next first read that
// needs it fetches it.
func (s *Service) FollowsCreated(edges []feeds.FollowEdge) {
	for _, e := range edges {
		select {
		case s.queue <- e:
		default:
			s.metrics.queueDropped()
		}
	}
	s.metrics.queueDepth(len(s.queue))
}

// followeeBackfill fetches a newly followed account's backlog, then merges
// it into the follower's feeds.
func (s *Service) followeeBackfill(ctx context.Context, e feeds.FollowEdge) {
	for _, f := range s.feeds {
		if f.FollowCollection != e.Collection {
			continue
		}
		for _, coll := range f.Targets {
			_ = s.ensureAccount(ctx, e.Subject, coll) // recorded in its listing
		}
	}
	if _, err := s.store.MergeFollowee(ctx, e.Viewer, e.Subject, e.Collection); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("merge backfilled followee", "err", err)
	}
}

// retryAfter is the wait before attempt n+1: exponential from RetryBase,
// capped at RetryMax.
func (s *Service) retryAfter(attempts int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < attempts && d < s.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.RetryMax)
}
