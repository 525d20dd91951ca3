// Package profiles hydrates the authors of a feed page with their profile
// and handle (getFeed's profiles=true). What the store holds is answered at
// once; what it lacks is fetched from the author's PDS in the background,
// and a read waits for it only a short, bounded time: a slow or dead PDS
// costs the reader at most Config.Wait, and the profile is there for a
// later read.
//
// Fetches are deduplicated per account, queued in a bounded queue (a full
// queue drops the fetch; the next read asks again), limited overall and per
// PDS host, and an account whose fetch failed is not fetched again for a
// while, so a page of accounts on a dead PDS does not hammer it.
package profiles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"golang.org/x/sync/errgroup"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds"
)

// Store is what the service needs of *feeds.Store.
type Store interface {
	Profiles(ctx context.Context, dids []syntax.DID) ([]feeds.Profile, error)
	StoreFetchedProfile(ctx context.Context, p feeds.FetchedProfile) error
	IdentitySeq() uint64
}

// Resolver finds an account's PDS and verified handle;
// *directory.Directory implements it.
type Resolver interface {
	LookupDIDWithHandle(ctx context.Context, did syntax.DID) (*directory.Identity, error)
}

// Config tunes the service. Zero values take the defaults noted.
type Config struct {
	// Wait bounds how long a read waits for missing profiles (250ms).
	Wait time.Duration
	// QueueSize bounds the accounts waiting to be fetched (1024), and
	// apart from them the accounts parked behind busy PDS hosts.
	QueueSize int
	// Concurrency accounts are fetched at once (4), at most PerHost of them
	// from one PDS host (2). A request running past slowRequest does not
	// count (up to Concurrency such requests): its worker is stood in
	// for.
	Concurrency, PerHost int
	// FetchTimeout bounds one account's resolution and fetch (10s).
	FetchTimeout time.Duration
	// StoreTimeout bounds the write of what a fetch learned, its wait for
	// the write lock included (10s).
	StoreTimeout time.Duration
	// RetryAfter: an account whose fetch failed is not fetched again
	// before this has passed (5m).
	RetryAfter time.Duration
	// HandleTTL: a stored handle verified longer ago than this is still
	// answered, and verified again in the background (24h). A handle can
	// stop verifying without an identity event (its DNS record or
	// well-known file changed), and identity events are lost in a gap.
	HandleTTL time.Duration
	// HostPauses holds the PDS hosts that answered 429 (a list of the
	// service's own). The daemon passes the one its other PDS clients
	// use, so a host that rate limited any of them is asked by none
	// until its pause ends.
	HostPauses *pds.HostPauses
	// Now is the clock (time.Now).
	Now func() time.Time
}

func (c *Config) setDefaults() {
	orDefault(&c.Wait, 250*time.Millisecond)
	orDefault(&c.QueueSize, 1024)
	orDefault(&c.Concurrency, 4)
	orDefault(&c.PerHost, 2)
	orDefault(&c.FetchTimeout, 10*time.Second)
	orDefault(&c.StoreTimeout, 10*time.Second)
	orDefault(&c.RetryAfter, 5*time.Minute)
	orDefault(&c.HandleTTL, 24*time.Hour)
	if c.HostPauses == nil {
		c.HostPauses = pds.NewHostPauses()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// orDefault sets a zero or negative *v to d.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Service hydrates profiles; Run serves its fetch queue.
type Service struct {
	cfg      Config
	store    Store
	resolver Resolver
	pds      *pds.Client
	log      *slog.Logger
	metrics  *Metrics
	queue    chan *job
	// handoff passes a job woken from parked to an idle worker, where
	// the worker that woke it has a request of its own to make first.
	handoff chan *job

	mu      sync.Mutex
	pending map[syntax.DID]*job
	// failed holds accounts whose fetch failed, until they may be tried
	// again; bounded by maxFailed.
	failed map[syntax.DID]time.Time
	// hostFetches counts the request slots taken per PDS host, at most
	// PerHost; parked holds, per host, the jobs that found its slots
	// taken, oldest first. A worker never waits for a host's slot: a job
	// is parked and the worker takes the next one, and a worker whose
	// request ends hands its slot to the oldest job parked behind it and
	// runs it. So a hanging PDS holds PerHost workers, not all of them
	// (waiting for a slot, they held every worker and failed jobs whose
	// PDS was never asked: TestAHangingPDSHoldsOnlyItsShareOfTheFetcher).
	// A woken job that does not use the slot (its DID no longer resolves,
	// or names another host) hands it on
	// (TestJobsParkedBehindAJobThatLeftItsHostStillRun). Parked jobs stay
	// pending; a host has at most maxParkedPerSlot×PerHost of them, and
	// all hosts together QueueSize (parkedJobs), past which a job is
	// dropped as if the queue were full. That bound is apart from the
	// queue's: parked jobs counted against the queue, and with a small
	// queue a few parked behind a hanging PDS dropped every other
	// account's fetch (TestAHangingPDSDoesNotFillASmallQueue).
	hostFetches map[string]int
	parked      map[string][]*job
	parkedJobs  int
	// stoodDown counts the workers stood in for while their request
	// runs past slowRequest, at most Concurrency (see getRecord).
	stoodDown int
	// paused holds the PDS hosts that answered 429, until the time they
	// gave (host_pause.go, Config.HostPauses). Unlike its request slots,
	// the fetcher shares it with the daemon's other PDS clients.
	paused *pds.HostPauses
}

// slowRequest is how long a profile request runs before its worker is
// stood in for by another: a hanging PDS holds its PerHost slots, and
// the workers in them finish its parked jobs, but the other workers
// keep fetching for healthy hosts
// (TestTwoHangingPDSesDoNotHoldTheFetcher).
const slowRequest = time.Second

// worker is one of Run's goroutines.
type worker struct {
	// start starts another worker.
	start func()
	// stoodDown: another worker took this one's place while its request
	// ran long; it ends when the job it runs and those it woke are over.
	stoodDown bool
}

// job is one account being fetched; done closes when it is over, however
// it went.
type job struct {
	did syntax.DID
	// record: the profile record is missing too, not only the handle.
	record bool
	// slot is the PDS host whose request slot was handed to the job as
	// it was woken from parked; guarded by Service.mu.
	slot string
	// pausedUntil, set when the job found its host paused or its own
	// request met the host's 429, is when the host may be asked again:
	// the account is held back until then, not for RetryAfter.
	pausedUntil time.Time
	done        chan struct{}
}

// New builds a Service; nil log and metrics are allowed.
func New(cfg Config, store Store, resolver Resolver, client *pds.Client, log *slog.Logger, m *Metrics) *Service {
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{
		cfg: cfg, store: store, resolver: resolver, pds: client,
		log:         log.With("component", "profiles"),
		metrics:     m,
		queue:       make(chan *job, cfg.QueueSize),
		handoff:     make(chan *job),
		pending:     map[syntax.DID]*job{},
		failed:      map[syntax.DID]time.Time{},
		hostFetches: map[string]int{},
		parked:      map[string][]*job{},
		paused:      cfg.HostPauses,
	}
}

// Hydrate returns what is known about each of dids, in order. Accounts
// with something missing are queued for a fetch, and Hydrate waits up to
// Config.Wait in all for those fetches before answering with what it has.
func (s *Service) Hydrate(ctx context.Context, dids []syntax.DID) ([]feeds.Profile, error) {
	out, err := s.store.Profiles(ctx, dids)
	if err != nil {
		return nil, err
	}
	var waiting []int // indexes into out
	var jobs []*job
	now := s.cfg.Now()
	for i := range out {
		if out[i].Complete() {
			s.metrics.hydrated(resultStored)
			if now.Sub(out[i].HandleCheckedAt) > s.cfg.HandleTTL {
				// Answered as stored; checked again for later reads.
				s.enqueue(out[i])
			}
			continue
		}
		if j := s.enqueue(out[i]); j != nil {
			waiting, jobs = append(waiting, i), append(jobs, j)
		} else {
			s.metrics.hydrated(resultMissing)
		}
	}
	if len(jobs) == 0 {
		return out, nil
	}

	timer := time.NewTimer(s.cfg.Wait)
	defer timer.Stop()
	expired := false
	var arrived []syntax.DID
	var at []int
	for k, j := range jobs {
		if !expired {
			select {
			case <-j.done:
			case <-timer.C:
				expired = true
			case <-ctx.Done():
				expired = true
			}
		}
		select {
		case <-j.done:
			arrived, at = append(arrived, j.did), append(at, waiting[k])
		default:
			s.metrics.hydrated(resultMissing)
		}
	}
	if len(arrived) == 0 {
		return out, nil
	}
	// The caller's context may have ended the wait (getFeed's deadline):
	// what arrived is read all the same, under a short bound of its own,
	// or a page whose profiles were ready would fail for its last
	// milliseconds (a review).
	rctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), arrivedReadTimeout)
		defer cancel()
	}
	again, err := s.store.Profiles(rctx, arrived)
	if err != nil {
		return nil, err
	}
	for k, p := range again {
		out[at[k]] = p
		if p.Known {
			s.metrics.hydrated(resultFetched)
		} else {
			s.metrics.hydrated(resultMissing)
		}
	}
	return out, nil
}

// arrivedReadTimeout bounds Hydrate's read of the profiles that arrived
// once the caller's context has ended: a read of at most a page's
// accounts from the store.
const arrivedReadTimeout = 250 * time.Millisecond

// maxFailed bounds the accounts remembered as failed; past it the
// expired ones are forgotten, and if that is not enough, all of them.
const maxFailed = 100_000

// enqueue returns the fetch job of p's account, queuing a new one unless
// one is under way, the account failed recently, or the queue is full
// (then nil).
func (s *Service) enqueue(p feeds.Profile) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.pending[p.DID]; ok {
		return j
	}
	now := s.cfg.Now()
	if until, ok := s.failed[p.DID]; ok {
		if now.Before(until) {
			return nil
		}
		delete(s.failed, p.DID)
	}
	j := &job{did: p.DID, record: !p.Known, done: make(chan struct{})}
	select {
	case s.queue <- j:
		s.pending[p.DID] = j
		return j
	default:
		s.metrics.fetched(outcomeQueueFull)
		return nil
	}
}

// finish ends a job; failed accounts are held back for RetryAfter, or
// until the pause of the host the job found paused, or paused with its
// request's 429, ends.
func (s *Service) finish(j *job, failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, j.did)
	if failed {
		now := s.cfg.Now()
		if len(s.failed) >= maxFailed {
			for d, until := range s.failed {
				if !now.Before(until) {
					delete(s.failed, d)
				}
			}
			if len(s.failed) >= maxFailed {
				clear(s.failed)
			}
		}
		until := now.Add(s.cfg.RetryAfter)
		if !j.pausedUntil.IsZero() {
			until = j.pausedUntil
		}
		s.failed[j.did] = until
	}
	close(j.done)
}

// Run fetches queued accounts until ctx ends. A failed database write is
// returned: the daemon's own state is broken.
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	var start func()
	start = func() {
		g.Go(func() error { return s.work(gctx, &worker{start: start}) })
	}
	for range s.cfg.Concurrency {
		start()
	}
	return g.Wait()
}

// work runs jobs until ctx ends, or until w was stood in for.
func (s *Service) work(ctx context.Context, w *worker) error {
	for {
		var j *job
		select {
		case <-ctx.Done():
			return nil
		case j = <-s.queue:
		case j = <-s.handoff:
		}
		if err := s.process(ctx, w, j); err != nil {
			return err
		}
		if w.stoodDown {
			s.mu.Lock()
			s.stoodDown--
			s.mu.Unlock()
			return nil
		}
	}
}

// getRecord reads j's profile record from its PDS. A request running
// past slowRequest gets w stood in for by a new worker, unless
// Concurrency workers already are: w then runs this job and those it
// wakes, and ends.
func (s *Service) getRecord(ctx context.Context, w *worker, pdsURL string, did syntax.DID) (pds.Record, error) {
	if w.stoodDown {
		return s.pds.GetRecord(ctx, pdsURL, did, feeds.ProfileCollection, feeds.ProfileRKey)
	}
	type result struct {
		rec pds.Record
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := s.pds.GetRecord(ctx, pdsURL, did, feeds.ProfileCollection, feeds.ProfileRKey)
		done <- result{rec, err}
	}()
	t := time.NewTimer(slowRequest)
	defer t.Stop()
	select {
	case r := <-done:
		return r.rec, r.err
	case <-t.C:
	}
	s.mu.Lock()
	if s.stoodDown < s.cfg.Concurrency {
		s.stoodDown++
		w.stoodDown = true
	}
	s.mu.Unlock()
	if w.stoodDown {
		w.start()
	}
	r := <-done
	return r.rec, r.err
}

// process fetches one account and stores what it learned, then the jobs
// it woke from parked, one after another.
func (s *Service) process(ctx context.Context, w *worker, j *job) error {
	todo := []*job{j}
	for len(todo) > 0 && ctx.Err() == nil {
		j, todo = todo[0], todo[1:]
		woken, err := s.processOne(ctx, w, j)
		if err != nil {
			return err
		}
		todo = append(todo, woken...)
	}
	return nil
}

// processOne fetches one account and stores what it learned; a job whose
// PDS host has no slot free is parked instead. woken are the parked jobs
// given a slot it let go, for the caller to run.
func (s *Service) processOne(ctx context.Context, w *worker, j *job) (woken []*job, err error) {
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FetchTimeout)
	defer cancel()
	fp, outcome := s.fetch(fctx, w, j, &woken)
	if outcome == outcomeParked {
		return woken, nil
	}
	// A slot handed to the job and not used goes to the next job parked.
	woken = append(woken, s.dropSlot(j)...)
	// A handle that could not be checked leaves the account incomplete,
	// so every read would queue it again: it is held back like a failure
	// (TestAHandleThatCouldNotBeCheckedIsHeldBack).
	failed := outcome.failed() || !fp.HandleResolved
	if outcome == outcomeQueueFull || outcome == outcomeIdentityBusy {
		// Dropped behind its host's parked jobs, like a full queue's: it
		// stores nothing and is not held back, so a later read asks
		// again; a write here would be repeated at each read for as long
		// as the host's slots stay taken
		// (TestAJobDroppedBehindAHangingPDSWritesNothing). The same for
		// a directory that did not ask (paused, or too many lookups in
		// flight): our load, which says nothing of the account, used to
		// hide its profile for RetryAfter.
		failed = false
	} else if fp.HandleResolved || fp.RecordFetched {
		// The write gets its own time: a fetch that used all of its
		// timeout must still be stored, and shutdown must not fail it.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
		err = s.store.StoreFetchedProfile(wctx, fp)
		cancel()
		if err != nil {
			failed = true
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, feeds.ErrWriteBusy) {
				// The write lock was busy past the write's time: in this
				// process (a long batch, a merge), or in another past
				// SQLite's busy timeout (an operator command beside the
				// daemon). The fetch failed, the database did not. It is
				// retried like any failed fetch
				// (TestAProfileWriteBehindAForeignWriteLockFailsOnlyTheFetch).
				s.log.Warn("store fetched profile: timed out waiting to write", "did", j.did, "err", err)
				err = nil
			} else {
				err = fmt.Errorf("store fetched profile: %w", err)
			}
		}
	}
	s.metrics.fetched(outcome)
	s.finish(j, failed)
	return woken, err
}

// offer hands each of jobs to a worker idle at the moment, and returns
// those no worker took.
func (s *Service) offer(jobs []*job) (left []*job) {
	for _, j := range jobs {
		select {
		case s.handoff <- j:
		default:
			left = append(left, j)
		}
	}
	return left
}

// fetch resolves the account's identity (PDS and verified handle) and,
// when the record is missing, reads it from the PDS; outcomeParked when
// the PDS host has no slot free, outcomeHostPaused when it asked us to
// wait. Jobs woken from parked by the slots it let go are added to woken.
func (s *Service) fetch(ctx context.Context, w *worker, j *job, woken *[]*job) (feeds.FetchedProfile, outcome) {
	fp := feeds.FetchedProfile{DID: j.did, At: s.cfg.Now(), IdentitySeq: s.store.IdentitySeq()}
	ident, err := s.resolver.LookupDIDWithHandle(ctx, j.did)
	if err != nil {
		s.log.Debug("resolve for profile", "did", j.did, "err", err)
		if errors.Is(err, directory.ErrBusy) {
			return fp, outcomeIdentityBusy
		}
		return fp, outcomeIdentityError
	}
	// A handle that could not be checked for now is not stored as
	// missing: the actor's handle stays unknown, so a later read fetches
	// it again, rather than showing no handle for good.
	fp.HandleResolved, fp.Handle = !ident.HandleUnchecked, ident.Handle
	if !j.record {
		if ident.HandleUnchecked {
			return fp, outcomeHandleUnchecked
		}
		return fp, outcomeHandleOnly
	}
	u, err := url.Parse(ident.PDS)
	if err != nil {
		return fp, outcomeIdentityError
	}
	// A paused host's job is not parked to wait for the pause; a slot
	// handed to it goes on unused (processOne's dropSlot).
	if s.hostPaused(j, u.Host) {
		return fp, outcomeHostPaused
	}
	o, handed := s.takeHost(u.Host, j)
	// A slot j was woken for and handed on as it moved hosts: its job
	// would wait here for j's request, which may hang, holding the slot;
	// an idle worker runs it now if there is one
	// (TestASlotHandedOnByAMovedJobIsNotHeldBehindItsRequest).
	*woken = append(*woken, s.offer(handed)...)
	if o != "" {
		return fp, o
	}
	// The host may have answered 429 since the check, to a request whose
	// slot this one now holds.
	if s.hostPaused(j, u.Host) {
		*woken = append(*woken, s.releaseHost(u.Host)...)
		return fp, outcomeHostPaused
	}
	rec, err := s.getRecord(ctx, w, ident.PDS, j.did)
	// Paused before the slot is handed on: no job parked behind this
	// request is sent to a host that just answered 429
	// (TestNoProfileRequestReachesAPausedHostFromParkedJobs).
	s.paused.Note(u.Host, err, s.cfg.Now())
	*woken = append(*woken, s.releaseHost(u.Host)...)
	switch pds.KindOf(err) {
	case 0:
		if err != nil {
			return fp, outcomePDSError // our own deadline
		}
	case pds.KindNotFound:
		fp.RecordFetched = true // the account has no profile
		return fp, outcomeAbsent
	case pds.KindBadResponse:
		return fp, outcomeInvalidRecord
	case pds.KindRateLimited:
		// The host limits us, not this account: it is held back for the
		// host's pause, as the host's other accounts are, not for
		// RetryAfter (TestTheAccountWhoseRequestMet429WaitsOnlyForThePause).
		s.hostPaused(j, u.Host)
		s.log.Debug("fetch profile", "did", j.did, "err", err)
		return fp, outcomePDSError
	default:
		s.log.Debug("fetch profile", "did", j.did, "err", err)
		return fp, outcomePDSError
	}
	fields, ok := feeds.ParseProfile(rec.Value)
	if !ok || rec.CID == "" {
		return fp, outcomeInvalidRecord
	}
	fp.RecordFetched, fp.Present, fp.CID, fp.Fields = true, true, rec.CID, fields
	return fp, outcomeStored
}
