package feeds

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// reopenListing is the SET clause that starts a listing over in a new
// round: used wherever stored records may no longer cover an account
// (it left the scope, its records were retired, a gap, an operator's
// reset), so the next viewer who needs it fetches it again.
const reopenListing = `complete = 0, cursor = '', low_rkey = '', page = 0, fetched = 0, round = round + 1`

// Listing is where the fetch of one account's collection from its PDS
// stands. A listing cursor is "ahead" of another when it is in a later
// round, or in the same round at a later page.
type Listing struct {
	Host   string
	Round  int
	Page   int
	Cursor string
	// LowKey is the lowest record key of the last page the round applied,
	// "" when not known; a resumed round's first page vouches for the keys
	// under it (KeySpan).
	LowKey    string
	Fetched   int
	Complete  bool
	Gone      bool
	Attempts  int
	LastError string
	NextRetry time.Time
	// AccountDeleted, set by ReadListing only, says an account event
	// deleted the account: there is nothing to list, and a listing would
	// store nothing (ApplyListingPage).
	AccountDeleted bool
	// Deletions is how many times an account event had deleted the
	// account when ReadListing read this state. It is not stored with the
	// listing: a run carries it in every state it writes, and a page or a
	// failure whose count is not the account's current one is from a run
	// begun before a deletion, which a reactivation since has unmarked,
	// and stores nothing.
	Deletions int64
}

// NextRound is the state that starts a new round of l's listing on host,
// from the newest records: a new host, or a cursor the PDS no longer
// honours.
func (l Listing) NextRound(host string) Listing {
	return Listing{Host: host, Round: l.Round + 1, Attempts: l.Attempts, Deletions: l.Deletions}
}

// Ahead reports whether l is a later position than o.
func (l Listing) Ahead(o Listing) bool {
	return l.Round > o.Round || (l.Round == o.Round && l.Page > o.Page)
}

// ListedRecord is one record from a PDS listing, parsed at the edge.
type ListedRecord struct {
	RKey        syntax.RecordKey
	CID         string
	Value       json.RawMessage
	Subject     syntax.DID // for follow collections
	CreatedAtUS int64
}

// ListingPage is one page of a listing and the state it moves to.
type ListingPage struct {
	Account    syntax.DID
	Collection syntax.NSID
	Records    []ListedRecord
	// To is the listing state after this page; it is stored in the same
	// transaction as the page's rows.
	To Listing
	// FetchedAt is when the page was asked for. A record a listing shows
	// gone is deleted at a revision just older than this, and a record an
	// earlier listing showed gone is written again by a page fetched well
	// after that one. Zero: the page deletes nothing, and writes nothing
	// over any tombstone.
	FetchedAt time.Time
	// Span, when set, is the stretch of keys the page lists whole. Stored
	// records in it that the page lacks were deleted upstream and are
	// deleted here (listing_reconcile.go). Nil for a page that cannot
	// vouch for its span: one with records it dropped, or out of order.
	Span *KeySpan
	// Finish, when set, is asked with the page's result, inside the
	// page's transaction, for the sync run the page ends: given one, it
	// is recorded with the page (RecordSyncRun), one write where a
	// listing's last page and its run took two. A first read's followees
	// each end a listing, and each of its writes may wait on a catch-up.
	Finish func(ListingResult) (SyncRun, bool)
}

// ListingResult counts what a page did.
type ListingResult struct {
	Written, Existing int
	// Stale is set when the stored state was already at or past the
	// page's (another run applied this page, or got further): the rows
	// were written, the cursor kept, nothing deleted.
	Stale bool
	// NotViewer is set for a page of follow records of an account that
	// views no feed of the collection any more (retired while the listing
	// ran, outside index_all mode): nothing was written, since only
	// viewers' follows are stored (the fan-out relies on it, audience.go).
	NotViewer bool
	// NotFollowed is set for a page of target records of an account no
	// viewer follows any more (outside index_all mode): nothing was
	// written and the listing stays open, so the account's next follower
	// lists it afresh (leaveScopeIfUnfollowed).
	NotFollowed bool
	// AccountDeleted is set for a page of a deleted account (an account
	// event deleted it, usually while the listing ran), or of a run begun
	// before a deletion that a reactivation has undone since
	// (Listing.Deletions): nothing was written, neither records nor the
	// listing state. The deletion removed them (deleteAccount), and the
	// page's cursor would stand for rows no longer stored.
	AccountDeleted bool
	// RunRecorded: the run Finish gave was recorded with the page.
	RunRecorded bool
	// Removed counts stored records (or follows) in the page's span that
	// the page did not list, deleted as the PDS no longer has them.
	Removed int
	// Restored counts records an earlier listing took for deleted that
	// this page lists: that inference was wrong (a PDS that answered
	// inconsistently, or a clock far off).
	Restored int
	// Edited counts stored records whose body and CID (follows whose
	// subject) this page replaced with the PDS's: edits the stream missed
	// (takeListedEdit, takeListedSubject).
	Edited int
}

// ReadListing returns the stored listing state; the zero Listing when
// there is none.
func (s *Store) ReadListing(ctx context.Context, account syntax.DID, collection syntax.NSID) (Listing, error) {
	collID, ok := s.collectionID(collection)
	if !ok {
		return Listing{}, ErrUnknownLane
	}
	var l Listing
	var nextUS int64
	// From the account, so that a deleted one, whose listings the deletion
	// removed, still says so.
	err := s.reader.QueryRowContext(ctx, `
		SELECT a.deleted, a.deletions, coalesce(l.host, ''), coalesce(l.round, 0), coalesce(l.page, 0), coalesce(l.cursor, ''),
			coalesce(l.low_rkey, ''), coalesce(l.fetched, 0), coalesce(l.complete, 0), coalesce(l.gone, 0),
			coalesce(l.attempts, 0), coalesce(l.last_error, ''), coalesce(l.next_retry_us, 0)
		FROM actors a LEFT JOIN listings l ON l.actor_id = a.id AND l.collection_id = ?2
		WHERE a.did = ?1`, string(account), collID).
		Scan(&l.AccountDeleted, &l.Deletions, &l.Host, &l.Round, &l.Page, &l.Cursor, &l.LowKey, &l.Fetched, &l.Complete, &l.Gone, &l.Attempts, &l.LastError, &nextUS)
	if errors.Is(err, sql.ErrNoRows) {
		return Listing{}, nil
	}
	if err != nil {
		return Listing{}, fmt.Errorf("read listing: %w", err)
	}
	l.NextRetry = fromMicros(nextUS)
	return l, nil
}

// ApplyListingPage writes a page of records where nothing is stored for
// their key (no row, no tombstone: what Jetstream delivered always wins
// over a listing, which carries no rev), deletes what the page's span
// shows is gone upstream, and stores the page's listing state in the same
// transaction. If the stored state is already ahead, the rows are still
// written (they are idempotent), the state is kept, and nothing is
// deleted: the run that got further speaks for the span. A page of a
// deleted account writes nothing (AccountDeleted).
func (s *Store) ApplyListingPage(ctx context.Context, p *ListingPage, now time.Time) (ListingResult, error) {
	collID, ok := s.collectionID(p.Collection)
	if !ok {
		return ListingResult{}, ErrUnknownLane
	}
	_, isFollow := s.followColls[p.Collection]
	var res ListingResult
	err := s.write(ctx, func(w *txWriter) error {
		if err := w.applyListingPage(p, collID, isFollow, now, &res); err != nil {
			return err
		}
		if p.Finish == nil {
			return nil
		}
		run, ok := p.Finish(res)
		if !ok {
			return nil
		}
		if err := w.recordSyncRun(run); err != nil {
			return err
		}
		res.RunRecorded = true
		return nil
	})
	return res, err
}

// applyListingPage is ApplyListingPage's transaction, but for the run
// recorded with it.
func (w *txWriter) applyListingPage(p *ListingPage, collID int64, isFollow bool, now time.Time, res *ListingResult) error {
	actorID, err := w.actorID(p.Account)
	if err != nil {
		return err
	}
	if res.AccountDeleted, err = w.accountDeletedSince(actorID, p.To.Deletions); err != nil || res.AccountDeleted {
		return err
	}
	if isFollow && !w.s.indexAll {
		viewer, err := w.viewsFollows(actorID, collID)
		if err != nil {
			return err
		}
		if !viewer {
			res.NotViewer = true
			return nil
		}
	}
	if !isFollow && !w.s.indexAll {
		var one int
		followed, err := w.queryRow(w.s.stmts.followedByAnyone, []any{actorID}, &one)
		if err != nil {
			return fmt.Errorf("check followers: %w", err)
		}
		if !followed {
			res.NotFollowed = true
			return nil
		}
	}
	// Read before the rows are written, which do not move it: a stale
	// page still writes what is missing, but takes no edit, as it
	// deletes nothing. An edit it takes keeps the stored revision, so
	// nothing else would order its body against the one a page ahead
	// of it, fetched after it, took (TestAStalePageDoesNotUndoAnEditAListingTook).
	cur, found, err := w.readListingState(actorID, collID)
	if err != nil {
		return err
	}
	stale := found && !p.To.Ahead(cur)
	rev := listingRev(p.FetchedAt)
	for i := range p.Records {
		r := &p.Records[i]
		var wrote bool
		if isFollow {
			wrote, err = w.listFollow(actorID, collID, r, rev, !stale)
		} else {
			wrote, err = w.listRecord(actorID, collID, r, rev, now, !stale)
		}
		if err != nil {
			return err
		}
		if wrote {
			res.Written++
		} else {
			res.Existing++
		}
	}
	res.Restored, res.Edited = w.restored, w.listedEdits
	if stale {
		res.Stale = true
		w.s.metrics.casMismatch("listing")
		return nil
	}
	if p.Span != nil && !p.FetchedAt.IsZero() {
		if res.Removed, err = w.reconcileSpan(p, actorID, collID, isFollow); err != nil {
			return err
		}
	}
	if !isFollow && p.To.Complete {
		// A target listing with a retry time stored is waited for:
		// a live follow wanted it (wantListings), or it failed, or
		// was cut off, under a first read that completed without it.
		// Followers whose first read is complete get it by a merge,
		// made here, with the page that completes the listing: made
		// after, by the caller (the retry loop's MergeAuthor, the
		// followee backfill's MergeFollowee), it was lost to a stop
		// or a crash in between, and the complete listing was never
		// due again
		// (TestABacklogListedJustBeforeAStopStillReachesTheFollowersFeed).
		var wantedUS int64
		if err := w.tx.QueryRowContext(w.ctx, `SELECT next_retry_us FROM listings WHERE actor_id = ? AND collection_id = ?`,
			actorID, collID).Scan(&wantedUS); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read listing retry: %w", err)
		}
		if wantedUS > 0 {
			if err := w.mergeAuthor(actorID, true); err != nil {
				return err
			}
		}
	}
	return w.writeListingState(actorID, collID, p.To, now)
}

// FailListing records a failed listing attempt without moving its cursor.
// A failure of a run that fell behind the stored state (the listing was
// reopened, or another run got further) is not recorded: writing back the
// run's older position would move the cursor backwards. Nor is one of a
// deleted account (its PDS answers "Could not find repo" to the next
// page): the run's position is past rows the deletion removed, and no
// retry time is needed, as DueListings skips a deleted account's listing.
func (s *Store) FailListing(ctx context.Context, account syntax.DID, collection syntax.NSID, l Listing, now time.Time) error {
	collID, ok := s.collectionID(collection)
	if !ok {
		return ErrUnknownLane
	}
	return s.write(ctx, func(w *txWriter) error {
		actorID, err := w.actorID(account)
		if err != nil {
			return err
		}
		if deleted, err := w.accountDeletedSince(actorID, l.Deletions); err != nil || deleted {
			return err
		}
		cur, found, err := w.readListingState(actorID, collID)
		if err != nil {
			return err
		}
		if found && cur.Ahead(l) {
			s.metrics.casMismatch("listing")
			return nil
		}
		l.LastError = truncate(l.LastError, 512)
		return w.writeListingState(actorID, collID, l, now)
	})
}

// accountDeleted reports whether an account event deleted the account
// (deleteAccount), and how many times one did.
func (w *txWriter) accountDeleted(actorID int64) (deleted bool, deletions int64, err error) {
	if _, err := w.queryRow(w.s.stmts.actorDeleted, []any{actorID}, &deleted, &deletions); err != nil {
		return false, 0, fmt.Errorf("read account deletion: %w", err)
	}
	return deleted, deletions, nil
}

// accountDeletedSince reports whether the account is deleted, or was
// deleted after a listing run read deletions (Listing.Deletions). Read in
// the transaction that would write the run's page or failure, it orders
// that write after a deletion committed while the listing ran, as the
// deletion's removal of the account's listings and records does not reach
// a run that holds its position in memory; the count catches a deletion
// a reactivation has unmarked since.
func (w *txWriter) accountDeletedSince(actorID, deletions int64) (bool, error) {
	deleted, now, err := w.accountDeleted(actorID)
	return deleted || now != deletions, err
}

func (w *txWriter) listFollow(actorID, collID int64, r *ListedRecord, listingRev string, takeEdits bool) (bool, error) {
	var subject int64
	var rev string
	found, err := w.queryRow(w.s.stmts.followByKey, []any{actorID, collID, string(r.RKey)}, &subject, &rev)
	if err != nil {
		return false, err
	}
	if found {
		if !takeEdits {
			return false, nil
		}
		return false, w.takeListedSubject(actorID, collID, subject, rev, r, listingRev)
	}
	blocked, restored, err := w.listedTombstone(actorID, collID, r.RKey, listingRev)
	if err != nil || blocked {
		return false, err
	}
	subjectID, err := w.actorID(r.Subject)
	if err != nil {
		return false, err
	}
	if _, err := w.exec(w.s.stmts.insertFollow, actorID, collID, string(r.RKey), subjectID, ""); err != nil {
		return false, fmt.Errorf("insert listed follow: %w", err)
	}
	if restored {
		// The inferred delete was an unfollow: the followee's records go
		// back into the follower's feeds as at a follow.
		if err := w.followed(actorID, collID, subjectID); err != nil {
			return false, err
		}
	}
	return true, nil
}

// takeListedSubject takes a listed follow's subject over the stored one's
// on the terms takeListedEdit takes a record's body: a follow whose
// subject changed while the stream could not tell us (a gap, or before
// the daemon ran) would otherwise go on standing for the old subject,
// whose records stayed in the follower's feeds even once the follower's
// last real follow of it was deleted, while the new subject's never came
// (TestAListedFollowTakesASubjectTheStreamMissed).
// The stored revision stays, so the stream's own events still apply over
// it. The change is applied as the stream's update to another subject is
// (movedFollow).
func (w *txWriter) takeListedSubject(actorID, collID, storedSubject int64, storedRev string, r *ListedRecord, listingRev string) error {
	if listingRev == "" || storedRev >= listingRev || notifiedSince(storedRev, syntax.TID(listingRev).Time().UnixMicro()) {
		return nil
	}
	subjectID, err := w.actorID(r.Subject)
	if err != nil || subjectID == storedSubject {
		return err
	}
	if _, err := w.exec(w.s.stmts.updateFollow, actorID, collID, string(r.RKey), subjectID, storedRev); err != nil {
		return fmt.Errorf("take listed follow subject: %w", err)
	}
	w.listedEdits++
	return w.movedFollow(actorID, collID, storedSubject, subjectID)
}

func (w *txWriter) listRecord(actorID, collID int64, r *ListedRecord, listingRev string, now time.Time, takeEdits bool) (bool, error) {
	var id, sortUS int64
	var rev string
	found, err := w.queryRow(w.s.stmts.recordByKey, []any{actorID, collID, string(r.RKey)}, &id, &rev, &sortUS)
	if err != nil {
		return false, err
	}
	if found {
		// Listed, though not written: it ages from now in stream time, as
		// a record the listing writes does (retainFrom below). Else
		// retention could retire it behind this listing, which would then
		// end complete without it; retention reopens complete listings
		// only (retainListing).
		res, err := w.tx.ExecContext(w.ctx, `UPDATE records SET indexed_us = ?2 WHERE id = ?1 AND indexed_us < ?2`,
			id, listedStreamTime(w.s.Cursor().TimeUS, now))
		if err != nil {
			return false, fmt.Errorf("refresh listed record: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			// The indexed time is what a page shows as time_us: the
			// record cache must forget the copy it holds
			// (TestTheRecordCacheForgetsARecordAListingRefreshed).
			w.recordChanged(id)
		}
		if !takeEdits {
			return false, nil
		}
		return false, w.takeListedEdit(id, collID, rev, r, listingRev)
	}
	blocked, restored, err := w.listedTombstone(actorID, collID, r.RKey, listingRev)
	if err != nil || blocked {
		return false, err
	}
	indexed := listedIndexTime(r, now)
	c := Change{TimeUS: indexed, CreatedAtUS: r.CreatedAtUS}
	// Retention ages a record by its indexed time against the stream's.
	// A listed record is stored now, in stream time, whatever its own
	// time: a post older than the retention window would otherwise be
	// retired at the next lap, before the first read or merge that
	// listed it put it into a feed, and the listing would end complete
	// with a hole.
	retainFrom := max(indexed, listedStreamTime(w.s.Cursor().TimeUS, now))
	id, _, err = w.insertRecord(w.s.stmts.insertRecord, actorID, collID, string(r.RKey), r.CID, "",
		c.SortKey(), retainFrom, r.CreatedAtUS, string(r.Value))
	if err != nil {
		return false, fmt.Errorf("insert listed record: %w", err)
	}
	if err := w.storeFields(id, collID, r.Value, false); err != nil {
		return false, err
	}
	if restored {
		// The inferred delete took it out of its followers' feeds: it goes
		// back the way a new record goes in (the sweep trims it where a
		// feed has moved on past it).
		if err := w.queueFanout(actorID, collID, c.SortKey(), id); err != nil {
			return false, err
		}
	}
	return true, nil
}

// takeListedEdit takes a listed record's body and CID over the stored
// copy's when the listing was fetched after that copy was written (its
// revision older than the listing's; a notified write read since the
// fetch is newer whatever its base): an edit the stream missed, in a gap
// or while the account was out of scope, would otherwise stay missed for
// good (TestAListingTakesAnEditTheStreamMissed). The revision stays the
// stored one, so the stream's own events, replayed or new, still apply
// over the listing's copy: the listing carries no revision of its own,
// and the stream wins where the two cannot be ordered.
func (w *txWriter) takeListedEdit(id, collID int64, storedRev string, r *ListedRecord, listingRev string) error {
	if listingRev == "" || storedRev >= listingRev || notifiedSince(storedRev, syntax.TID(listingRev).Time().UnixMicro()) {
		return nil
	}
	res, err := w.tx.ExecContext(w.ctx, `UPDATE records SET cid = ?2, body = ?3 WHERE id = ?1 AND cid <> ?2`,
		id, r.CID, string(r.Value))
	if err != nil {
		return fmt.Errorf("take listed edit: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	w.recordChanged(id)
	w.listedEdits++
	return w.storeFields(id, collID, r.Value, true)
}

// listedTombstone reports whether a tombstone keeps a listed record out:
// any the stream delivered does (the listing carries no rev to weigh
// against it). One an earlier listing inferred (reconcileSpan) and older
// than this listing is cleared instead, and restored reported: the
// record is there after all.
func (w *txWriter) listedTombstone(actorID, collID int64, rkey syntax.RecordKey, listingRev string) (blocked, restored bool, err error) {
	var tsRev string
	found, err := w.queryRow(w.s.stmts.tombstoneByKey, []any{actorID, collID, string(rkey)}, &tsRev)
	if err != nil || !found {
		return found, false, err
	}
	if !listedOver(tsRev, listingRev) {
		return true, false, nil
	}
	if _, err := w.exec(w.s.stmts.deleteTombstone, actorID, collID, string(rkey)); err != nil {
		return false, false, fmt.Errorf("clear tombstone: %w", err)
	}
	w.restored++
	return false, true, nil
}

// listedStreamTime is the stream time a listed record ages from: the
// stream cursor, or, before the stream has ever moved it (a new database
// listed by an operator's backfill, or a first read before the daemon's
// first batch), the listing's own time. Aged from a cursor of 0, a listed
// post older than the retention window was retired at the stream's first
// lap, behind a listing still in progress, which then ended complete
// without it (TestAListingBeforeAnyStreamTimeKeepsItsRecordsAWindow).
func listedStreamTime(cursorUS int64, now time.Time) int64 {
	if cursorUS == 0 {
		return now.UnixMicro()
	}
	return cursorUS
}

// listedIndexTime stands in for the event time a listed record never had:
// the time in its TID record key (when the repo wrote it), else its
// createdAt, never later than now.
func listedIndexTime(r *ListedRecord, now time.Time) int64 {
	nowUS := now.UnixMicro()
	t := nowUS
	if tid, err := syntax.ParseTID(string(r.RKey)); err == nil {
		t = tid.Time().UnixMicro()
	} else if r.CreatedAtUS > 0 {
		t = r.CreatedAtUS
	}
	return min(t, nowUS)
}

func (w *txWriter) readListingState(actorID, collID int64) (Listing, bool, error) {
	var l Listing
	found, err := w.queryRow(w.s.stmts.listingByKey, []any{actorID, collID}, &l.Round, &l.Page)
	if err != nil {
		return l, false, fmt.Errorf("read listing: %w", err)
	}
	return l, found, nil
}

func (w *txWriter) writeListingState(actorID, collID int64, l Listing, now time.Time) error {
	_, err := w.tx.ExecContext(w.ctx, `
		INSERT INTO listings (actor_id, collection_id, host, round, page, cursor, fetched, complete, gone,
			attempts, last_error, next_retry_us, updated_us, low_rkey)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
		ON CONFLICT (actor_id, collection_id) DO UPDATE SET
			host = excluded.host, round = excluded.round, page = excluded.page, cursor = excluded.cursor,
			fetched = excluded.fetched, complete = excluded.complete, gone = excluded.gone,
			attempts = excluded.attempts, last_error = excluded.last_error,
			next_retry_us = CASE WHEN excluded.complete = 0 AND excluded.next_retry_us = 0
				THEN listings.next_retry_us ELSE excluded.next_retry_us END,
			updated_us = excluded.updated_us, low_rkey = excluded.low_rkey`,
		actorID, collID, l.Host, l.Round, l.Page, l.Cursor, l.Fetched, l.Complete, l.Gone,
		l.Attempts, l.LastError, micros(l.NextRetry), now.UnixMicro(), l.LowKey)
	if err != nil {
		return fmt.Errorf("write listing: %w", err)
	}
	return nil
}

// Followees lists the distinct accounts the viewer follows in a follow
// collection.
func (s *Store) Followees(ctx context.Context, viewer syntax.DID, followCollection syntax.NSID) ([]syntax.DID, error) {
	collID, ok := s.followColls[followCollection]
	if !ok {
		return nil, ErrUnknownLane
	}
	rows, err := s.reader.QueryContext(ctx, `
		SELECT DISTINCT a.did FROM follows f
		JOIN actors a ON a.id = f.subject_id
		WHERE f.actor_id = (SELECT id FROM actors WHERE did = ?) AND f.collection_id = ?`,
		string(viewer), collID)
	if err != nil {
		return nil, fmt.Errorf("list followees: %w", err)
	}
	defer rows.Close()
	var out []syntax.DID
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, err
		}
		out = append(out, syntax.DID(d))
	}
	return out, rows.Err()
}

// SyncRun is the record of one backfill run.
type SyncRun struct {
	Kind string // follows, targets, jetstream
	// Subject is the account listed, or the Jetstream host.
	Subject    string
	Collection syntax.NSID
	Pages      int
	Written    int
	Skipped    int
	Outcome    string // ok, error, gone
	Error      string
	Started    time.Time
	Duration   time.Duration
	// StartCursor and EndCursor are a Jetstream session's first and last
	// time_us (0 for listings, whose cursor is on the listing).
	StartCursor, EndCursor int64
}

// SyncRunsKept is how many of the newest sync runs a store keeps: the history
// operators read (status, audit) is recent, and one row per listing run
// and per stream session would otherwise grow without end (a connection
// that keeps dropping adds thousands a day).
const SyncRunsKept = 10_000

// RecordSyncRun stores a sync run for operators, and drops the runs older
// than the newest SyncRunsKept (s.syncRunsKept).
func (s *Store) RecordSyncRun(ctx context.Context, r SyncRun) error {
	return s.write(ctx, func(w *txWriter) error { return w.recordSyncRun(r) })
}

// recordSyncRun is RecordSyncRun's transaction.
func (w *txWriter) recordSyncRun(r SyncRun) error {
	res, err := w.tx.ExecContext(w.ctx, `
		INSERT INTO sync_runs (kind, subject, collection, pages, written, skipped, outcome, error, started_us, duration_us,
			start_cursor, end_cursor)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.Kind, r.Subject, string(r.Collection), r.Pages, r.Written, r.Skipped, r.Outcome,
		truncate(r.Error, 512), r.Started.UnixMicro(), r.Duration.Microseconds(), r.StartCursor, r.EndCursor)
	if err != nil {
		return fmt.Errorf("record sync run: %w", err)
	}
	// Ids grow with every insert, so the rows past the bound are a
	// range at the start of the table: usually one row goes per run.
	id, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("record sync run: %w", err)
	}
	if _, err := w.tx.ExecContext(w.ctx, `DELETE FROM sync_runs WHERE id <= ?`, id-int64(w.s.syncRunsKept)); err != nil {
		return fmt.Errorf("drop old sync runs: %w", err)
	}
	return nil
}

func (s *Store) collectionID(nsid syntax.NSID) (int64, bool) {
	if id, ok := s.followColls[nsid]; ok {
		return id, true
	}
	id, ok := s.targetColls[nsid]
	return id, ok
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// ListingKey names one account's collection.
type ListingKey struct {
	Account    syntax.DID
	Collection syntax.NSID
}

// DueListings returns up to limit target listings due for an attempt:
// failed before, or wanted by a live follow (wantListings), not complete,
// not gone, under maxAttempts, their retry time passed. A viewer's own follow listing is retried by its next
// read instead. Only listings someone still needs are due: of a collection
// an enabled feed targets and, outside index_all mode, of an account a
// viewer follows (one that left the scope is listed again by its next
// follower's first read). A deleted account's listing is never due: its
// pages are not stored (ApplyListingPage), so one a live follow wanted
// would stay due, and be fetched again, at every retry. The longest
// overdue come first, so a backlog of due listings is worked through
// rather than the same ones retried.
func (s *Store) DueListings(ctx context.Context, now time.Time, maxAttempts, limit int) ([]ListingKey, error) {
	inScope := ``
	if !s.indexAll {
		inScope = `AND EXISTS (SELECT 1 FROM follows f WHERE f.subject_id = l.actor_id AND f.actor_id <> l.actor_id)`
	}
	rows, err := s.reader.QueryContext(ctx, `
		SELECT a.did, c.nsid FROM listings l
		JOIN actors a ON a.id = l.actor_id
		JOIN collections c ON c.id = l.collection_id
		WHERE l.complete = 0 AND l.gone = 0 AND l.attempts < ? AND a.deleted = 0
		AND l.next_retry_us > 0 AND l.next_retry_us <= ?
		AND l.collection_id IN (SELECT collection_id FROM feed_targets WHERE enabled = 1)
		AND l.collection_id NOT IN (SELECT follow_collection_id FROM feed_targets WHERE enabled = 1)
		`+inScope+`
		ORDER BY l.next_retry_us
		LIMIT ?`, maxAttempts, now.UnixMicro(), limit)
	if err != nil {
		return nil, fmt.Errorf("find due listings: %w", err)
	}
	defer rows.Close()
	var out []ListingKey
	for rows.Next() {
		var k ListingKey
		if err := rows.Scan(&k.Account, &k.Collection); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// MergeAuthor merges an author's newest stored records into its
// followers' feeds, as after a reactivation: the last step of a retried
// backfill, since the followers' first reads completed without them.
func (s *Store) MergeAuthor(ctx context.Context, author syntax.DID) (int64, error) {
	var rows int64
	err := s.write(ctx, func(w *txWriter) error {
		id, found, err := w.existingActorID(author)
		if err != nil || !found {
			return err
		}
		if err := w.remergeAuthor(id); err != nil {
			return err
		}
		rows = w.res.MergedRows
		return nil
	})
	return rows, err
}
