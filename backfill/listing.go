package backfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory"
	"github.com/atfeeds/appview/failpoint"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/pds"
)

// ensureListing pages through one account's collection on its PDS until
// the listing ends or maxRecords were fetched, committing every page
// together with its page cursor, so an interrupted run resumes where it
// stopped and never stores a cursor past rows it did not write.
func (s *Service) ensureListing(ctx context.Context, account syntax.DID, coll syntax.NSID, maxRecords int, kind string) error {
	st, err := s.store.ReadListing(ctx, account, coll)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	switch {
	case st.Complete, st.AccountDeleted:
		return nil
	case st.Attempts >= s.cfg.MaxAttempts:
		return fmt.Errorf("gave up after %d attempts: %s", st.Attempts, st.LastError)
	case now.Before(st.NextRetry):
		return &notDueError{until: st.NextRetry, last: st.LastError}
	}
	run := listingRun{SyncRun: feeds.SyncRun{Kind: kind, Subject: string(account), Collection: coll, Started: now, Outcome: "ok"}}
	// A follow listing is read to its end, past a short page, so that
	// follows deleted upstream below the last full page are found too
	// (pageSpan). A target listing stops at a short page: its depth is
	// the newest posts, and older ones are not worth the request.
	err = s.list(ctx, account, coll, maxRecords, kind == "follows", st, &run)
	noFollower := errors.Is(err, errNoFollower)
	if noFollower {
		err = nil
	}
	run.Duration = s.cfg.Now().Sub(run.Started)
	if err != nil {
		run.Outcome, run.Error = "error", err.Error()
		if pds.KindOf(err) == pds.KindRepoGone {
			run.Outcome = "gone"
		}
	}
	if run.Skipped > 0 {
		malformed := run.Skipped - run.overLimit
		// Hostile or broken records of the pages stored: counted, and
		// one line a run, also when the run was cut off after them: the
		// next run resumes past the pages it committed and never sees
		// them again (TestRecordsDroppedByAListingCutOffAreCounted). A
		// page not stored is fetched again, and counted then
		// (TestRecordsDroppedFromAPageThatWasNotStoredAreCountedOnce).
		s.metrics.droppedRecords(kind, malformed, run.overLimit)
		s.log.Info("dropped listed records", "account", account, "collection", coll, "malformed", malformed, "over_limit", run.overLimit)
	}
	if ourContextEnded(ctx, err) {
		// Not recorded as a sync run (nothing failed: the run was cut
		// off by its time or a shutdown, and resumes from its committed
		// page), but counted: left out, the slowest runs (a hanging
		// PDS) were missing from the duration histogram (a review).
		s.metrics.run(kind, "cut_off", run.Duration)
		return err
	}
	if !run.recorded {
		if rerr := s.store.RecordSyncRun(context.WithoutCancel(ctx), run.SyncRun); rerr != nil {
			s.log.Warn("record sync run", "err", rerr)
		}
	}
	s.metrics.run(kind, run.Outcome, run.Duration)
	if noFollower {
		return errNoFollower
	}
	return err
}

// listingRun is a listing run's record, and whether its last page's
// transaction stored it (feeds.ListingPage.Finish).
type listingRun struct {
	feeds.SyncRun
	recorded bool
	// overLimit counts the records of the run's stored pages that were
	// past the limit asked for; SyncRun.Skipped counts them too, with the
	// malformed ones.
	overLimit int
}

// errNoFollower ends a target listing whose page found that no viewer
// follows the account any more: it stored nothing, and is no failure.
// Callers that shared the run (ensureAccount) list the account again
// themselves: one whose viewer has just followed it must not take this
// run's end for its records being stored.
var errNoFollower = errors.New("no viewer follows the account")

// notDueError says a listing failed before and is not due for another
// attempt yet. A first read that needs it waits for it rather than
// counting a failed attempt of its own (runFirstRead).
type notDueError struct {
	until time.Time
	last  string // the listing's last error
}

func (e *notDueError) Error() string {
	return fmt.Sprintf("not due before %s: %s", e.until.Format(time.RFC3339), e.last)
}

func (s *Service) list(ctx context.Context, account syntax.DID, coll syntax.NSID, maxRecords int, toTheEnd bool, st feeds.Listing, run *listingRun) error {
	id, err := s.resolver.LookupDID(ctx, account)
	if err != nil {
		return s.fail(ctx, account, coll, st, fmt.Errorf("resolve %s: %w", account, err), false)
	}
	host := id.PDS
	st = resumeAt(st, host)
	restarted := false
	// above is the lowest key of the round's previous page: the next page
	// speaks for the keys under it. A resumed round has it from the
	// stored listing, when the page before was in order.
	above, aboveKnown := resumeAbove(st)
	cycle := newPageCycle()
	for {
		// A resumed listing asks only for what its limit has left.
		limit := pageLimit(maxRecords, st.Fetched)
		asOf := s.cfg.Now()
		page, err := s.fetchPage(ctx, host, account, coll, limit, st.Cursor)
		if err != nil {
			if pds.KindOf(err) == pds.KindBadCursor && st.Cursor != "" && !restarted {
				// The PDS no longer honours our cursor: restart the round once.
				restarted = true
				st = st.NextRound(host)
				above, aboveKnown = resumeAbove(st)
				cycle = newPageCycle()
				continue
			}
			if errors.Is(err, pds.ErrCursorTooLong) {
				// Never sent back: the round ends here with that error.
				s.log.Warn("cursor_too_long", "account", account, "collection", coll, "host", host)
				s.metrics.cursorTooLong()
			}
			return s.fail(ctx, account, coll, st, err, pds.KindOf(err) == pds.KindRepoGone)
		}
		records := make([]feeds.ListedRecord, 0, len(page.Records))
		// dropped counts once the page is stored: a page not written is
		// fetched again, and its records dropped again, by the next run.
		dropped := page.Dropped()
		for _, r := range page.Records {
			lr, ok := s.parseRecord(coll, r)
			if !ok {
				dropped++
				continue
			}
			records = append(records, lr)
		}
		// The account answered a page: whatever made its listing gone
		// once (a deactivated repo) has passed, and a gone listing is
		// skipped by DueListings and wantListing, so a run cut off after
		// this page would otherwise never be retried
		// (TestAListingCutOffAfterAPageOfAReactivatedAccountIsNotGone).
		next := st
		next.Gone = false
		next.Page++
		next.Cursor = page.Cursor
		next.Fetched += len(page.Records) + page.Dropped()
		// The listing ends with no cursor, a cursor that does not advance,
		// a short page (saving the empty page a PDS answers last), or
		// enough records.
		got := len(page.Records) + page.Dropped()
		stuck := page.Cursor != "" && page.Cursor == st.Cursor
		if cycle.circles(page.Cursor, records) && !stuck && page.Cursor != "" {
			stuck = true
			s.log.Warn("listing_pages_in_circles", "account", account, "collection", coll, "host", host, "page", next.Page)
			s.metrics.pagedInCircles(run.Kind)
		}
		// Only a page without a cursor, or an empty one, shows the end;
		// a short page with a cursor may be a PDS that caps its pages.
		ended := page.Cursor == "" || got == 0
		short := got < limit && !toTheEnd
		done := ended || short || stuck || (maxRecords > 0 && next.Fetched >= maxRecords)
		if done {
			next.Complete, next.Attempts, next.LastError, next.NextRetry = true, 0, "", time.Time{}
		}
		var span *feeds.KeySpan
		if len(records) == len(page.Records) && page.Dropped() == 0 && !stuck {
			span = pageSpan(records, above, aboveKnown, ended)
		}
		above, aboveKnown = nextAbove(page, above, aboveKnown)
		next.LowKey = ""
		if aboveKnown {
			next.LowKey = above
		}
		failpoint.Hit(failpoint.BackfillBeforePage)
		now := s.cfg.Now()
		listed := &feeds.ListingPage{Account: account, Collection: coll, Records: records, To: next, FetchedAt: asOf, Span: span}
		if done {
			// The run ends with this page, unless another run is ahead
			// or the account was deleted: it is recorded with the page,
			// as ensureListing would record it after, with the page
			// counted as below.
			listed.Finish = func(res feeds.ListingResult) (feeds.SyncRun, bool) {
				if res.Stale || res.AccountDeleted {
					return feeds.SyncRun{}, false
				}
				r := run.SyncRun
				r.Pages++
				r.Written += res.Written
				if !res.NotViewer && !res.NotFollowed {
					r.Skipped += dropped
				}
				r.Duration = now.Sub(r.Started)
				return r, true
			}
		}
		res, err := s.store.ApplyListingPage(ctx, listed, now)
		if err != nil {
			// Recorded like a failed request, so the listing is due again
			// (at once when our context ended): the first reads that
			// shared this fetch completed without it, and the retry loop
			// merges it into their feeds
			// (TestASharedFolloweeFetchCutOffByItsOwnersTimeoutIsNotLost).
			return s.fail(ctx, account, coll, st, err, false)
		}
		failpoint.Hit(failpoint.BackfillAfterPage)
		run.Pages++
		if !res.Stale && !res.NotViewer && !res.NotFollowed && !res.AccountDeleted {
			countStoredPage(ctx) // the page moved the listing's cursor
			run.Skipped += dropped
			run.overLimit += page.OverLimit
		}
		run.Written += res.Written
		run.recorded = res.RunRecorded
		s.metrics.reconciled(res.Removed, res.Restored, res.Edited)
		if res.NotViewer {
			// The account no longer reads a feed these follows build.
			return nil
		}
		if res.NotFollowed {
			// No viewer follows it any more: nothing of it is stored.
			return errNoFollower
		}
		if res.AccountDeleted || res.Stale {
			// Deleted since the run began, or another run is ahead of us
			// on this listing: go on from what is stored now, so this run
			// too ends only once the listing is complete. Ending here
			// would let the caller build a feed on the pages stored so
			// far.
			cur, err := s.store.ReadListing(ctx, account, coll)
			if err != nil {
				return s.fail(ctx, account, coll, next, err, false)
			}
			if cur.AccountDeleted {
				// Nothing of it is stored, and its repo is gone, as its
				// PDS would answer next.
				run.Outcome, run.Error = "gone", "account deleted"
				return nil
			}
			// A deletion that a reactivation has undone since removed
			// what the run had stored: cur is no listing, under the new
			// deletion count, and the run lists afresh.
			if cur.Complete {
				return nil
			}
			st = resumeAt(cur, host)
			above, aboveKnown = resumeAbove(st)
			cycle = newPageCycle()
			continue
		}
		st = next
		if done {
			return nil
		}
	}
}

// pageSpan is the stretch of keys a page of records speaks for whole: from
// its lowest key (or from the bottom, when the listing ended there) up to
// the previous page's lowest key (or the top, on a round's first page). A
// PDS lists newest key first; a page out of that order, or one that
// overlaps the page before it, vouches for nothing, and neither does a
// page whose upper end is unknown (a resumed round) and that is empty.
//
// An ended listing is one that answered no cursor, or an empty page.
func pageSpan(records []feeds.ListedRecord, above string, aboveKnown, ended bool) *feeds.KeySpan {
	sp := &feeds.KeySpan{}
	for i := range records {
		k := string(records[i].RKey)
		if i > 0 && k >= string(records[i-1].RKey) {
			return nil
		}
	}
	switch {
	case aboveKnown:
		sp.Below = above
	case len(records) > 0:
		// Just above the page's highest key.
		sp.Below = string(records[0].RKey) + "\x00"
	default:
		return nil
	}
	if len(records) > 0 && sp.Below != "" && string(records[0].RKey) >= sp.Below {
		return nil
	}
	if !ended {
		if len(records) == 0 {
			return nil
		}
		sp.From = string(records[len(records)-1].RKey)
	}
	return sp
}

// nextAbove is the upper end of the span of the page after this one: its
// lowest key, if it listed its keys in order and dropped none (a dropped
// record may have been its lowest, and the next page must not vouch for
// its key).
func nextAbove(page pds.Page, above string, known bool) (string, bool) {
	records := page.Records
	if page.Dropped() > 0 {
		return "", false
	}
	if len(records) == 0 {
		return above, known
	}
	for i := 1; i < len(records); i++ {
		if records[i].RKey >= records[i-1].RKey {
			return "", false
		}
	}
	return string(records[len(records)-1].RKey), true
}

// resumeAbove is the upper end of the span of the next page of listing
// st: the top at a round's start, else the stored lowest key of the page
// before, when known.
func resumeAbove(st feeds.Listing) (string, bool) {
	if st.Cursor == "" {
		return "", true
	}
	return st.LowKey, st.LowKey != ""
}

// resumeAt is where a run on host goes on from the stored state st: from
// its cursor, unless that was taken under another PDS, where it means
// nothing: then a new round.
func resumeAt(st feeds.Listing, host string) feeds.Listing {
	if st.Host != host {
		return st.NextRound(host)
	}
	return st
}

// pageLimit is the size of the next page of a listing bounded by
// maxRecords (0: unbounded) that has fetched records so far, stored
// pages of an interrupted run included.
func pageLimit(maxRecords, fetched int) int {
	if maxRecords <= 0 {
		return pds.MaxLimit
	}
	return min(pds.MaxLimit, max(1, maxRecords-fetched))
}

// fetchPage asks the PDS for one page within the global and per-host
// request limits.
func (s *Service) fetchPage(ctx context.Context, host string, account syntax.DID, coll syntax.NSID, limit int, cursor string) (pds.Page, error) {
	// Hosts that answered 429 are paused (pds.HostPauses): no request is
	// sent to one before the time it asked for.
	key := pds.HostKey(host)
	if err := s.paused.Check(key, s.cfg.Now()); err != nil {
		s.metrics.pdsRequest("host_paused")
		return pds.Page{}, err
	}
	release, err := s.limits.Acquire(ctx, key)
	if err != nil {
		return pds.Page{}, err
	}
	defer release()
	// The host may have asked us to wait while this request waited for
	// a slot (TestNoRequestReachesAPausedHostFromTheSlotQueue).
	if err := s.paused.Check(key, s.cfg.Now()); err != nil {
		s.metrics.pdsRequest("host_paused")
		return pds.Page{}, err
	}
	page, err := s.pds.ListRecords(ctx, host, account, coll, limit, cursor)
	s.paused.Note(key, err, s.cfg.Now())
	outcome := "ok"
	if err != nil {
		outcome = pds.KindOf(err).String()
		if outcome == "" || pds.KindOf(err) == 0 {
			outcome = "error"
		}
	}
	s.metrics.pdsRequest(outcome)
	return page, err
}

// fail records a failed attempt on the listing, with its retry time, and
// returns err. A listing ended by the caller's context ending is not the
// PDS's failure: it counts no attempt and is left due at once, so the
// retry loop takes it up (a first read sharing this fetch may have
// completed without it).
func (s *Service) fail(ctx context.Context, account syntax.DID, coll syntax.NSID, st feeds.Listing, err error, gone bool) error {
	if ourContextEnded(ctx, err) {
		st.NextRetry = s.cfg.Now()
	} else {
		// A host's rate limit says nothing about the account: it costs
		// the listing no attempt, only the wait the host asked for. Nor
		// does a directory with too many lookups in flight, which a
		// stranger's hanging hosts can bring about
		// (TestABusyDirectoryCostsAListingNoAttempt).
		if pds.KindOf(err) != pds.KindRateLimited && !errors.Is(err, directory.ErrBusy) {
			st.Attempts++
		}
		st.LastError = err.Error()
		st.Gone = gone
		wait := s.retryAfter(st.Attempts)
		if errors.Is(err, directory.ErrBusy) {
			// The directory was not asked: the listing waits the time
			// it gives (a pause's time left), not the schedule's step,
			// or a first read waiting on it was held a minute past a
			// PLC's pause of a second
			// (TestAPLCRateLimitDefersFirstReadsUntilItsPauseEnds).
			wait = directory.RetryAfter(err)
		}
		var pe *pds.Error
		if errors.As(err, &pe) && pe.RetryAfter > 0 && (pe.RetryAfter > wait || pe.Kind == pds.KindRateLimited) {
			// A rate limit's Retry-After is the host's word on when to
			// come back, shorter than our backoff or not.
			wait = pe.RetryAfter
		}
		st.NextRetry = s.cfg.Now().Add(wait)
	}
	if ferr := s.store.FailListing(context.WithoutCancel(ctx), account, coll, st, s.cfg.Now()); ferr != nil {
		s.log.Error("record failed listing", "err", ferr)
	}
	return err
}

// ourContextEnded says whether err ended a listing because the caller's
// context did (a shutdown, a client gone, a first read's run timeout), not
// because of anything the PDS did: such a listing counts no attempt and
// records no run. A first read cut off by its run timeout would otherwise
// charge a failed attempt, and a retry delay, to every followee listing
// still waiting for a request slot; six such and the account was given
// up on. A PDS that is slow to answer still
// fails by the request's own timeout (pds.KindTimeout), which counts.
func ourContextEnded(ctx context.Context, err error) bool {
	return err != nil && (errors.Is(err, context.Canceled) || ctx.Err() != nil)
}

// parseRecord reads what the store needs from a listed record, as the
// stream reads it (feeds.ParseRecordHead): the subject of a follow (a
// DID, else the record is skipped) and createdAt.
func (s *Service) parseRecord(coll syntax.NSID, r pds.Record) (feeds.ListedRecord, bool) {
	head, ok := feeds.ParseRecordHead(r.Value)
	if !ok {
		return feeds.ListedRecord{}, false
	}
	lr := feeds.ListedRecord{RKey: r.RKey, CID: r.CID, Value: r.Value, CreatedAtUS: head.CreatedAtUS}
	if s.isFollowCollection(coll) {
		did, err := syntax.ParseDID(head.Subject)
		if err != nil {
			return feeds.ListedRecord{}, false
		}
		lr.Subject = did
	}
	return lr, true
}

func (s *Service) isFollowCollection(coll syntax.NSID) bool {
	for _, f := range s.feeds {
		if f.FollowCollection == coll {
			return true
		}
	}
	return false
}
