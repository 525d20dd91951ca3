package backfill

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"golang.org/x/sync/errgroup"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds"
)

// firstRead is one run of a viewer's first read; concurrent requests share
// it and wait on done.
type firstRead struct {
	done chan struct{}
	err  error
}

// Ensure makes sure the viewer's feed has had its first read. A complete
// viewer returns at once: its last-read time, refreshed at most hourly,
// is written later (touchLater). A new viewer is registered, its first
// read starts (or is joined, if one is running) in the background, and
// Ensure waits for it up to FirstReadWait: the caller then serves
// whatever the feed holds.
//
// client identifies the caller (its address) for the per-client limit on
// new viewers; a rejected first read is a *RejectedError. An actor that
// is not a viewer yet is refused before anything touches the database:
// whether it is one is a lookup in memory, then its client's bucket, then
// a place in the first-read queue, and only then the registration write.
func (s *Service) Ensure(ctx context.Context, viewer syntax.DID, feed, client string) error {
	if _, ok := s.feeds[feed]; !ok {
		return feeds.ErrUnknownLane
	}
	key := viewerKey{viewer, feed}
	now := s.cfg.Now()
	s.mu.Lock()
	touched, complete := s.complete.get(key)
	_, running := s.running[key]
	until, waiting := s.notDue.get(key)
	forgets := s.forgets
	s.mu.Unlock()
	if complete && now.Sub(touched) < feeds.LastReadResolution {
		return nil
	}
	if waiting && now.Before(until) {
		return nil // failed before, not due yet: serve what there is
	}
	var slot *queueSlot
	switch {
	case running:
		// A run is on: RegisterViewer below, then join it.
	case complete || s.store.KnownViewer(viewer, feed):
		// Known, to this process with its last read due, or only to the
		// database (the process started since). The read pool says
		// whether it is still complete (an operator's reset, a gap,
		// another process's retirement are noticed within the hour)
		// without the wait for the writer.
		lastRead, done, err := s.store.StoredViewer(ctx, viewer, feed)
		if err != nil {
			return fmt.Errorf("read viewer: %w", err)
		}
		if done && now.Sub(lastRead) < feeds.LastReadResolution {
			// Nothing to write until an hour after the stored read.
			s.markComplete(key, lastRead, forgets)
			return nil
		}
		if done && s.touchLater(viewer, feed, lastRead, now) {
			s.markComplete(key, now, forgets)
			return nil
		}
	default:
		// A new viewer: the expensive path, admitted per client and then
		// against the global cap, before its registration is written.
		if err := s.admit.allowClient(client, now); err != nil {
			s.metrics.rejected("rate_limited")
			return err
		}
		var err error
		if slot, err = s.admit.enqueue(); err != nil {
			s.metrics.rejected("overloaded")
			return err
		}
	}
	defer slot.release() // unless a run took it over
	// The request waits on it: a catch-up's batch commits early for it
	// (feeds.Urgent), as for the run's writes below.
	st, err := s.store.RegisterViewer(feeds.Urgent(ctx), viewer, feed, now)
	if err != nil {
		return fmt.Errorf("register viewer: %w", err)
	}
	if st.Complete {
		s.markComplete(key, now, forgets)
		return nil
	}
	if st.Attempts >= s.cfg.MaxAttempts || now.Before(st.NextRetry) {
		// Failed before and not due again: serve what there is, and
		// remember it until then (an hour at most, so an operator's
		// reset is noticed).
		until := now.Add(time.Hour)
		if st.Attempts < s.cfg.MaxAttempts && st.NextRetry.Before(until) {
			until = st.NextRetry
		}
		s.markNotDue(key, now, until)
		return nil
	}
	run, err := s.start(key, slot)
	if err != nil && slot == nil && errors.Is(err, ErrOverloaded) {
		// An existing viewer due a rebuild (after a gap, a target added,
		// a failed run due again) is not refused its stored feed: the
		// rebuild waits for its next read with a place free
		// (TestAnExistingViewerDueARebuildIsNotRefusedItsFeed).
		s.metrics.rejected("postponed")
		return nil
	}
	if err != nil {
		s.metrics.rejected("overloaded")
		return err
	}
	timer := time.NewTimer(s.cfg.FirstReadWait)
	defer timer.Stop()
	select {
	case <-run.done:
	case <-timer.C:
		s.metrics.firstReadWaitedOut()
	case <-ctx.Done():
		// A deadline is the caller's own bound on the wait (getFeed's,
		// before its write timeout): waited out as much as the timer's.
		// A cancellation is the client gone.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.metrics.firstReadWaitedOut()
		}
	}
	return nil
}

// maxNotDue bounds the notDue map, and maxComplete the complete map;
// past either bound, or past maxViewerMemoBytes, the stale entries are
// dropped and, if that is not enough, the map starts over (the database
// still answers for anyone forgotten). complete had no bound: it held
// every viewer found complete until a gap or a retirement, and none is
// retired in a viewer TTL's first 30 days
// (TestTheMemoryOfViewersIsBounded).
const (
	maxNotDue   = 100_000
	maxComplete = 100_000
)

// maxViewerMemoBytes bounds what each of complete and notDue holds: a
// viewer's DID is the caller's, up to 2 KiB, so 100k entries could hold
// 200 MiB of them (TestTheMemoryOfViewersIsBoundedInBytes).
// viewerEntryOverhead approximates an entry's bytes beyond its DID's.
const (
	maxViewerMemoBytes  = 16 << 20
	viewerEntryOverhead = 64
)

// viewerMemo is a map of viewers to a time (complete: when last touched;
// notDue: until when), bounded in entries and in bytes. s.mu guards it.
type viewerMemo struct {
	m                map[viewerKey]time.Time
	bytes            int
	maxLen, maxBytes int
}

func newViewerMemo(maxLen int) viewerMemo {
	return viewerMemo{m: map[viewerKey]time.Time{}, maxLen: maxLen, maxBytes: maxViewerMemoBytes}
}

func viewerEntryBytes(k viewerKey) int { return len(k.viewer) + viewerEntryOverhead }

func (v *viewerMemo) get(k viewerKey) (time.Time, bool) {
	t, ok := v.m[k]
	return t, ok
}

// set remembers k with t, first making room: past the bounds the entries
// stale says are of no more use go, and if they leave less than a quarter
// of the bounds free, all go: else the memory would be full again within
// a few inserts, each paying for a scan of every entry
// (TestAFullViewerMemoDoesNotScanAtEveryInsert).
func (v *viewerMemo) set(k viewerKey, t time.Time, stale func(time.Time) bool) {
	if _, ok := v.m[k]; ok {
		v.m[k] = t
		return
	}
	n := viewerEntryBytes(k)
	if len(v.m) >= v.maxLen || v.bytes+n > v.maxBytes {
		maps.DeleteFunc(v.m, func(k viewerKey, t time.Time) bool {
			if stale(t) {
				v.bytes -= viewerEntryBytes(k)
				return true
			}
			return false
		})
		if len(v.m) > v.maxLen*3/4 || v.bytes+n > v.maxBytes*3/4 {
			v.clear()
		}
	}
	v.m[k] = t
	v.bytes += n
}

func (v *viewerMemo) delete(k viewerKey) {
	if _, ok := v.m[k]; ok {
		delete(v.m, k)
		v.bytes -= viewerEntryBytes(k)
	}
}

func (v *viewerMemo) clear() {
	clear(v.m)
	v.bytes = 0
}

func (s *Service) markNotDue(key viewerKey, now, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notDue.set(key, until, func(t time.Time) bool { return !now.Before(t) })
}

// markComplete remembers a viewer found complete in the database, unless
// forgetComplete ran since forgets was read, before that database read: a
// gap committed in between marked the viewer for a rebuild, which the
// memory must not hide.
func (s *Service) markComplete(key viewerKey, now time.Time, forgets uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if forgets != s.forgets {
		return
	}
	// An entry touched an hour ago or more answers no read from memory.
	s.complete.set(key, now, func(t time.Time) bool { return now.Sub(t) >= feeds.LastReadResolution })
}

// forgetsNow is the count markComplete compares with: read it before the
// database read that finds a viewer complete.
func (s *Service) forgetsNow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forgets
}

// start returns the running first read of key, starting one if none runs
// in this process. Across processes the durable claim decides. A run
// started here takes over slot, when the caller reserved one; otherwise
// it reserves its own place in the queue.
func (s *Service) start(key viewerKey, slot *queueSlot) (*firstRead, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.running[key]; ok {
		return r, nil
	}
	if s.stopping {
		// Run is waiting for the runs to end: no new one joins them.
		return nil, ErrStopping
	}
	if slot == nil {
		var err error
		if slot, err = s.admit.enqueue(); err != nil {
			return nil, err
		}
	}
	run := slot.take()
	r := &firstRead{done: make(chan struct{})}
	s.running[key] = r
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		// A queued run waits at most RunTimeout for a running place, and
		// then has the whole of RunTimeout from its claim: time spent
		// behind other viewers' runs is not charged to it as a timed-out
		// attempt (TestAQueuedFirstReadGetsItsRunTimeoutFromItsClaim).
		// A getFeed request waits on the run (up to FirstReadWait): its
		// writes do not wait out a catch-up's whole batch (feeds.Urgent).
		bg := feeds.Urgent(s.bg)
		queued, cancelQueued := context.WithTimeout(bg, s.cfg.RunTimeout)
		select {
		case s.admit.running <- struct{}{}:
			cancelQueued()
			ctx, cancel := context.WithTimeout(bg, s.cfg.RunTimeout)
			_, r.err = s.runFirstRead(ctx, key, nil)
			cancel()
			<-s.admit.running
		case <-queued.Done():
			cancelQueued()
			r.err = queued.Err()
		}
		// The place is given back before anyone hears the run ended: a
		// caller answered at done may ask again at once and must find it
		// free (TestAdmissionConfigTakesEffect caught the other order).
		run.release()
		s.mu.Lock()
		delete(s.running, key)
		s.mu.Unlock()
		close(r.done)
	}()
	return r, nil
}

// runFirstRead claims the viewer's first read, backfills it and builds the
// feed, returning the rows built. progress, when set, hears how many of
// the followees' collections are fetched. A run whose context ends gives
// its claim back, so the next one (a restarted daemon, a re-run command)
// resumes from the stored listing cursors at once.
func (s *Service) runFirstRead(ctx context.Context, key viewerKey, progress func(done, total int)) (int64, error) {
	start := s.cfg.Now()
	forgets := s.forgetsNow()
	claimed, err := s.store.ClaimFirstRead(ctx, key.viewer, key.feed, s.owner, start, s.cfg.Lease)
	if err != nil {
		return 0, err
	}
	if !claimed {
		// Another daemon (or a run we lost track of) holds a live claim.
		s.metrics.firstRead("claimed_elsewhere", 0)
		return 0, ErrClaimedElsewhere
	}
	var rows int64
	ctx, stored := withStoredPages(ctx)
	stopHolding := s.holdClaim(ctx, key)
	err = s.backfillViewer(ctx, key, progress)
	stopHolding()
	if err == nil {
		rows, err = s.store.CompleteFirstRead(ctx, key.viewer, key.feed, s.owner, s.cfg.Now())
	}
	took := s.cfg.Now().Sub(start)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if rerr := s.store.ReleaseFirstRead(rctx, key.viewer, key.feed, s.owner); rerr != nil {
				s.log.Warn("release first-read claim", "err", rerr)
			}
			return 0, err
		}
		if errors.Is(err, feeds.ErrClaimLost) {
			// A gap released the claim (or another process took it over
			// after a lapse): nothing to record, the claim is not ours.
			// The viewer is pending, and its next read runs again.
			s.metrics.firstRead("claim_lost", took)
			s.log.Info("first read lost its claim", "viewer", key.viewer, "feed", key.feed)
			return 0, err
		}
		if errors.Is(err, feeds.ErrFeedsDiffer) {
			// An operator command's store: the daemon restarted with other
			// feeds while it ran, and the write was refused. Nothing about
			// the viewer failed, so no attempt is counted (six would give
			// it up); the claim is given back, and the viewer's next read,
			// under the daemon's feeds, runs again at once.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if rerr := s.store.ReleaseFirstRead(rctx, key.viewer, key.feed, s.owner); rerr != nil {
				s.log.Warn("release first-read claim", "err", rerr)
			}
			s.metrics.firstRead("feeds_changed", took)
			return 0, err
		}
		// A run cut off by its time bound still records its failure.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var notDue *notDueError
		var pe *pds.Error
		if errors.As(err, &pe) && pe.Kind == pds.KindRateLimited && errors.Is(err, pds.ErrHostPaused) {
			// The viewer's PDS host is paused by another account's 429:
			// nothing was asked for this viewer. It waits the time the
			// host asked for with no attempt counted, or a busy shared
			// host would use up its attempts and have it given up on
			// while nothing was tried. (A 429 to the viewer's own request
			// counts, as any failure: else a PDS that always answers 429
			// had its viewer retried at every read for good.)
			wait := pe.RetryAfter
			if wait <= 0 {
				wait = pds.DefaultHostPause
			}
			notDue = &notDueError{until: s.cfg.Now().Add(wait), last: err.Error()}
		}
		if errors.Is(err, directory.ErrBusy) {
			// The identity directory could not be asked: the PLC paused
			// us after a 429 or 503, or too many lookups were in flight.
			// Nothing was learnt about the viewer, so, as for a paused
			// host, it waits with no attempt counted
			// (TestAPausedDirectoryCostsAFirstReadNoAttempt).
			notDue = &notDueError{until: s.cfg.Now().Add(directory.RetryAfter(err)), last: err.Error()}
		}
		if notDue != nil || errors.As(err, &notDue) {
			// The viewer's follow listing waits out its own retry time (a
			// PDS's Retry-After can be long): the viewer waits with it,
			// without an attempt counted, or a viewer retried on a
			// shorter schedule would use up its attempts and be given up
			// on while nothing was tried.
			if ferr := s.store.DeferFirstRead(fctx, key.viewer, key.feed, s.owner, err.Error(), notDue.until); ferr != nil {
				s.log.Error("record deferred first read", "err", ferr)
			}
			s.metrics.firstRead("deferred", took)
			return 0, err
		}
		st, _ := s.store.RegisterViewer(fctx, key.viewer, key.feed, s.cfg.Now())
		next := s.cfg.Now().Add(s.retryAfter(st.Attempts + 1))
		record := s.store.FailFirstRead
		if ctx.Err() != nil && stored.Load() > 0 && s.spareCutOff(key) {
			// Cut off by the run timeout after it moved listing cursors:
			// the next run resumes past them. A viewer who follows
			// thousands of accounts on slow hosts needs several such
			// runs, and counted, they had it given up on while each one
			// advanced. A run cut off with nothing stored still counts
			// (TestAFirstReadCutOffAfterProgressCountsNoAttempt), and so
			// does one past the spared runs (spareCutOff).
			record = s.store.DeferFirstRead
		}
		if ferr := record(fctx, key.viewer, key.feed, s.owner, err.Error(), next); ferr != nil {
			s.log.Error("record failed first read", "err", ferr)
		}
		outcome := "failed"
		if errors.Is(err, context.DeadlineExceeded) {
			outcome = "timed_out"
		}
		s.metrics.firstRead(outcome, took)
		s.log.Info("first read failed", "viewer", key.viewer, "feed", key.feed, "err", err)
		return 0, err
	}
	s.markComplete(key, s.cfg.Now(), forgets)
	s.metrics.firstRead("complete", took)
	return rows, nil
}

// holdClaim renews the run's first-read claim every third of the lease
// until stop is called, so a run longer than the lease (an operator's
// backfill of a large account has no run timeout) is not taken over by
// another process meanwhile, and does not end in ErrClaimLost. A renewal
// that fails (the database locked past its busy timeout, say) leaves the
// claim held, so the next tick tries again, still within the lease; only
// a claim no longer held (released by a gap, or taken over) ends the
// renewals. stop returns once no renewal can follow: the claim is then
// released or completed without being taken again.
func (s *Service) holdClaim(ctx context.Context, key viewerKey) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			held, err := s.renew(ctx, key.viewer, key.feed, s.owner, s.cfg.Now(), s.cfg.Lease)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				s.log.Warn("first-read claim not renewed, retrying", "viewer", key.viewer, "feed", key.feed, "err", err)
			case !held:
				s.log.Warn("first-read claim lost", "viewer", key.viewer, "feed", key.feed)
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// backfillViewer lists the viewer's follows, then makes sure every
// followee's recent targets are stored. Only a failure to read the
// viewer's own follows fails the first read; a followee that cannot be
// fetched is recorded on its listing and retried on its own schedule.
func (s *Service) backfillViewer(ctx context.Context, key viewerKey, progress func(done, total int)) error {
	f := s.feeds[key.feed]
	if err := s.ensureListing(ctx, key.viewer, f.FollowCollection, s.cfg.MaxFollows, "follows"); err != nil {
		return fmt.Errorf("list follows: %w", err)
	}
	followees, err := s.store.Followees(ctx, key.viewer, f.FollowCollection)
	if err != nil {
		return err
	}
	// A viewer who follows itself gets nothing of its own in its feed, and
	// a self-follow puts no account in scope: its records are not fetched.
	followees = slices.DeleteFunc(followees, func(d syntax.DID) bool { return d == key.viewer })
	total := len(followees) * len(f.Targets)
	var done atomic.Int64
	if progress != nil {
		progress(0, total)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Concurrency)
	for _, account := range followees {
		for _, coll := range f.Targets {
			g.Go(func() error {
				if err := s.ensureAccount(gctx, account, coll); errors.Is(err, context.Canceled) {
					return err
				}
				if progress != nil {
					progress(int(done.Add(1)), total)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// accountRun de-duplicates concurrent fetches of one account's collection.
type accountRun struct {
	done chan struct{}
	err  error
	// cutOff: the fetch ended because its owner's context did (a run
	// timeout, a shutdown), not for anything the PDS did.
	cutOff bool
	// noFollower: a page found that no viewer followed the account, and
	// stored nothing. A caller who joined the run may follow it since
	// (its first read's follow listing stored the follow after that
	// page): it lists the account itself
	// (TestAJoinerOfAListingThatFoundNoFollowerListsItItself).
	noFollower bool
	// urgency marks the run's writes (its pages) urgent once a first
	// read, which a getFeed request waits on, runs or joins it; a
	// followee's backfill alone does not (feeds.Shared).
	urgency *feeds.Urgency
}

// ensureAccount fetches an account's newest targets of one collection
// unless they are already stored (its listing is complete), gone, or
// failed and not yet due again. Concurrent callers share one fetch; one
// whose owner was cut off is taken up by a caller still running, so that
// caller's feed is not built without it.
func (s *Service) ensureAccount(ctx context.Context, account syntax.DID, coll syntax.NSID) error {
	key := accountKey{account, coll}
	relisted := false
	for {
		s.mu.Lock()
		r, ok := s.accounts[key]
		var runCtx context.Context
		if !ok {
			r = &accountRun{done: make(chan struct{})}
			runCtx, r.urgency = feeds.Shared(ctx)
			s.accounts[key] = r
		} else {
			r.urgency.RaiseFor(ctx)
		}
		s.mu.Unlock()
		if !ok {
			return s.ownAccountRun(runCtx, key, r)
		}
		if s.joined != nil {
			s.joined(key)
		}
		select {
		case <-r.done:
			if r.cutOff && ctx.Err() == nil {
				continue
			}
			if r.noFollower && !relisted && ctx.Err() == nil {
				relisted = true
				continue
			}
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ownAccountRun runs the fetch the callers of ensureAccount share.
func (s *Service) ownAccountRun(ctx context.Context, key accountKey, r *accountRun) error {
	account, coll := key.account, key.collection
	r.err = s.ensureListing(ctx, account, coll, s.cfg.Depth, "targets")
	if errors.Is(r.err, errNoFollower) {
		r.err, r.noFollower = nil, true
	}
	r.cutOff = ourContextEnded(ctx, r.err)
	s.mu.Lock()
	delete(s.accounts, key)
	s.mu.Unlock()
	close(r.done)
	return r.err
}

// storedPagesKey is the context key of a first read's count of listing
// pages that moved a listing's cursor: whether a run cut off by its
// timeout got anywhere (runFirstRead). It rides on the context because
// the pages are stored deep in listings the run shares with others
// (ensureAccount), on the run's own context.
type storedPagesKey struct{}

// withStoredPages returns ctx carrying a fresh count of stored pages.
func withStoredPages(ctx context.Context) (context.Context, *atomic.Int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, storedPagesKey{}, n), n
}

// countStoredPage counts a stored page in the count ctx carries, if any.
func countStoredPage(ctx context.Context) {
	if n, ok := ctx.Value(storedPagesKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}

// defaultSparedCutOffs is how many runs of one viewer cut off after
// progress a process counts no attempt for. Progress is a page that moved
// a listing's cursor, and a hostile PDS can make one every run (answer a
// resumed cursor with an error that starts the round over, then hang), so
// without a bound such a viewer would be retried for good, each run
// holding a running place for the run timeout. With the default six
// attempts, the honest viewer with thousands of follows on slow hosts gets
// 6 + 8 runs before it is given up on.
const defaultSparedCutOffs = 8

// maxSparedViewers bounds the viewers spareCutOff keeps counts of.
const maxSparedViewers = 10_000

// spareCutOff reports whether a run of key cut off after progress may go
// uncounted, and counts it. The counts live in memory: a restart starts
// them over, as it starts the runs over. They are forgotten together when
// maxSparedViewers are tracked, as the admission forgets its clients.
func (s *Service) spareCutOff(key viewerKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.sparedCutOffs[key]
	if n >= s.maxSparedCutOffs {
		return false
	}
	if len(s.sparedCutOffs) >= maxSparedViewers {
		clear(s.sparedCutOffs)
	}
	s.sparedCutOffs[key] = n + 1
	return true
}
