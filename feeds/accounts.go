package feeds

import (
	"fmt"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// applyAccount applies an account event. An author going inactive
// (deactivated, takendown, suspended, deleted) disappears from its
// followers' feeds; coming back merges
// its newest stored records into its followers' feeds again, as a follow
// merge does. A deleted account's records and follows are deleted.
// Accounts the store never interned are not touched, as one event a batch
// would find them unknown (accountSchedule).
func (w *txWriter) applyAccount(a *AccountStatus) error {
	id, found, err := w.existingActorID(a.DID)
	if err != nil || !found {
		return err
	}
	var wasActive bool
	var statusUS, statusSeq int64
	if _, err := w.queryRow(w.s.stmts.actorStatus, []any{id}, &wasActive, &statusUS, &statusSeq); err != nil {
		return fmt.Errorf("read account status: %w", err)
	}
	at := a.statusTimeUS()
	if at > 0 && !a.newerStatus(statusUS, statusSeq) {
		// A replay (the reconnect rewind) of an event applied already,
		// or one older than it: account events carry no revision, and
		// applying an old deactivation again would hide the author anew.
		w.res.Duplicates++
		return nil
	}
	if at > 0 {
		if _, err := w.tx.ExecContext(w.ctx, `UPDATE actors SET status_us = ?, status_seq = ? WHERE id = ?`, at, a.storedSeq(), id); err != nil {
			return fmt.Errorf("record account status time: %w", err)
		}
	}
	if a.Active {
		// A listing its PDS answered "gone" (deactivated, taken down) is
		// fetched again: due at once, its attempts counted afresh. Even
		// if the store never saw the account go: the PDS may have said so
		// first.
		if _, err := w.tx.ExecContext(w.ctx, `
			UPDATE listings SET gone = 0, attempts = 0, last_error = '', next_retry_us = 1
			WHERE actor_id = ? AND gone = 1`, id); err != nil {
			return fmt.Errorf("reopen gone listings: %w", err)
		}
		if wasActive {
			return nil
		}
		var wasDeleted bool
		var deletions int64
		if _, err := w.queryRow(w.s.stmts.actorDeleted, []any{id}, &wasDeleted, &deletions); err != nil {
			return fmt.Errorf("read account deletion: %w", err)
		}
		// A deleted account that comes back may be listed again.
		if _, err := w.tx.ExecContext(w.ctx, `UPDATE actors SET active = 1, deleted = 0 WHERE id = ?`, id); err != nil {
			return fmt.Errorf("mark active: %w", err)
		}
		w.res.Applied++
		if wasDeleted {
			if err := w.rebuildRestored(id); err != nil {
				return err
			}
			w.res.Restored = append(w.res.Restored, a.DID)
		}
		return w.remergeAuthor(id)
	}
	if _, err := w.tx.ExecContext(w.ctx, `UPDATE actors SET active = 0 WHERE id = ?`, id); err != nil {
		return fmt.Errorf("mark inactive: %w", err)
	}
	for i := range w.s.lanes {
		l := &w.s.lanes[i]
		n, err := w.exec(w.s.stmts.unfeedAuthor, id, l.followCollID, l.id, l.collectionID)
		if err != nil {
			return fmt.Errorf("hide inactive author: %w", err)
		}
		w.res.RemovedRows += n
	}
	w.res.Applied++
	if a.Status != "deleted" {
		return nil
	}
	return w.deleteAccount(id, a.TimeUS)
}

// statusTimeUS is the time that orders a's account against the status
// stored (actors.status_us): the relay's, which every Jetstream host
// carries alike, else time_us. Each host stamps time_us with its own
// clock, up to the decoder's skew allowance ahead: a deactivation
// delivered by a fast host would make the reactivation that followed,
// delivered by another after a failover, look older, and the account
// would stay hidden for good. The relay's time is bounded as time_us is
// (jetstream.Account.Time), so a frame cannot pin an account's status.
func (a *AccountStatus) statusTimeUS() int64 {
	if a.RelayTimeUS > 0 {
		return a.RelayTimeUS
	}
	return a.TimeUS
}

// newerStatus says whether a is newer than the status stored at statusUS
// and statusSeq: by time, then, for two events of one millisecond, by the
// relay's sequence number. A duplicate is not newer. The sequence number
// is not bounded, and need not be: it decides only between events of the
// same time, and any later one still wins.
//
// A status stored as a time_us (statusSeq timeUSStatus: written before
// schema 0018, or from an event without a relay time) is compared with
// a's time_us. A host stamps time_us when it reads the event, later than
// the relay's time by its lag; compared with a's relay time, a change
// that followed within that lag looked older and was lost
// (TestAReactivationAfterAStatusStoredByTimeUSIsApplied).
func (a *AccountStatus) newerStatus(statusUS, statusSeq int64) bool {
	if statusSeq == timeUSStatus {
		return a.TimeUS > statusUS
	}
	at := a.statusTimeUS()
	return at > statusUS || at == statusUS && a.RelaySeq > statusSeq
}

// timeUSStatus in actors.status_seq says that status_us holds a time_us,
// not a relay time (schema 0018).
const timeUSStatus = -1

// storedSeq is what actors.status_seq records of a: its relay sequence
// number, or timeUSStatus when it is ordered by its time_us.
func (a *AccountStatus) storedSeq() int64 {
	if a.RelayTimeUS > 0 {
		return a.RelaySeq
	}
	return timeUSStatus
}

// rebuildRestored asks for what a deleted account's return needs and no
// first read or live follow would ask for again, its deletion having
// removed its listings, follows and feeds: its target listings are due at
// once (the retry loop lists them where a viewer follows it, and merges
// them into its followers' feeds), and each of its feeds is built again
// by a first read at its next read, as after a gap. A first read under
// way loses its claim, so it cannot complete with the follows the
// deletion removed.
func (w *txWriter) rebuildRestored(id int64) error {
	// The deletion's tombstones go: the restored repository holds those
	// records and follows again. Kept, they blocked a listing fetched
	// within minutes of the deletion, which speaks as of 5 minutes before
	// its fetch (listedOver), and the account's posts and follows never
	// came back (a review). Stream deletes, and deletes a listing
	// inferred before the deletion, stay.
	if _, err := w.tx.ExecContext(w.ctx, `
		DELETE FROM tombstones WHERE actor_id = ?1
		AND deleted_us = (SELECT deleted_us FROM actors WHERE id = ?1 AND deleted_us > 0)
		AND substr(rev, -length(?2)) = ?2`, id, unlistedSuffix); err != nil {
		return fmt.Errorf("clear restored account's deletion tombstones: %w", err)
	}
	for followCollID := range w.s.lanesByFollow {
		if err := w.wantListings(id, followCollID); err != nil {
			return err
		}
	}
	if _, err := w.tx.ExecContext(w.ctx, `
		UPDATE viewers SET state = 'pending', attempts = 0, next_retry_us = 0, claim_owner = '', claim_until_us = 0
		WHERE actor_id = ?`, id); err != nil {
		return fmt.Errorf("rebuild restored viewer: %w", err)
	}
	return nil
}

// deleteAccount deletes a deleted account's records and follows, burying
// them (buryAccount), its feeds, listings, profile and handle, and marks it
// deleted, so that a listing of it still running stores none of them again
// (ApplyListingPage, FailListing).
func (w *txWriter) deleteAccount(id, timeUS int64) error {
	if err := w.buryAccount(id, timeUS); err != nil {
		return err
	}
	if err := w.deleteAccountRecords(id); err != nil {
		return err
	}
	// The accounts it followed may be left with no follower: outside
	// index_all mode they leave the scope as after an unfollow, so a later
	// follower's first read lists their records again.
	var subjects []int64
	if !w.s.indexAll {
		var err error
		if subjects, err = scanIDs(w.tx.QueryContext(w.ctx, `SELECT DISTINCT subject_id FROM follows WHERE actor_id = ?`, id)); err != nil {
			return fmt.Errorf("list deleted account's followees: %w", err)
		}
	}
	for _, q := range []string{
		`DELETE FROM feed_items WHERE viewer_id = ?`,
		`DELETE FROM follows WHERE actor_id = ?`,
		`DELETE FROM listings WHERE actor_id = ?`,
	} {
		if _, err := w.tx.ExecContext(w.ctx, q, id); err != nil {
			return fmt.Errorf("delete account data: %w", err)
		}
	}
	if _, err := w.tx.ExecContext(w.ctx, `UPDATE actors SET handle = NULL, deleted = 1, deletions = deletions + 1, deleted_us = ?2
		WHERE id = ?1`, id, timeUS); err != nil {
		return fmt.Errorf("mark account deleted: %w", err)
	}
	// Dropped as when it leaves the scope, so a profile fetch begun before
	// the deletion does not store what it read
	// (TestAFetchSpanningAnAccountDeletionIsNotStored).
	if err := w.dropProfile(id); err != nil {
		return err
	}
	for _, sub := range subjects {
		if err := w.leaveScopeIfUnfollowed(sub); err != nil {
			return err
		}
	}
	return nil
}

// buryAccount writes a tombstone for each of a deleting account's records
// and follows, as new as the deletion: the revision of a commit made at
// the deletion's stream time, or the row's own if newer. The reconnect
// rewind replays the account's creates from the seconds before the
// deletion, and without tombstones they would be stored again. Commits of
// an account restored later carry newer revisions and are stored. The
// revisions end in unlistedSuffix, as a listing's inferred deletes do: a
// listing of the restored account fetched after the deletion may clear
// them (listedOver), where a stream delete would block it. Their
// deleted_us is the deletion's time_us, stored as actors.deleted_us, and
// the account's reactivation clears them (rebuildRestored).
func (w *txWriter) buryAccount(actorID, timeUS int64) error {
	var deletedRev string
	if timeUS > 0 {
		deletedRev = syntax.NewTID(timeUS, 0).String()
	}
	for _, table := range []string{"records", "follows"} {
		q := `INSERT INTO tombstones (actor_id, collection_id, rkey, rev, deleted_us)
			SELECT actor_id, collection_id, rkey, max(rev, ?2) || ?4, ?3 FROM ` + table + ` WHERE actor_id = ?1
			ON CONFLICT (actor_id, collection_id, rkey) DO UPDATE SET rev = excluded.rev, deleted_us = excluded.deleted_us
			WHERE excluded.rev > tombstones.rev`
		if _, err := w.tx.ExecContext(w.ctx, q, actorID, deletedRev, timeUS, unlistedSuffix); err != nil {
			return fmt.Errorf("bury deleted account's %s: %w", table, err)
		}
	}
	return nil
}

// deleteAccountRecords deletes a deleted account's records, noting each
// for the record cache.
func (w *txWriter) deleteAccountRecords(actorID int64) error {
	ids, err := scanIDs(w.tx.QueryContext(w.ctx, `DELETE FROM records WHERE actor_id = ? RETURNING id`, actorID))
	if err != nil {
		return fmt.Errorf("delete account records: %w", err)
	}
	for _, id := range ids {
		w.recordChanged(id)
	}
	return nil
}

// remergeAuthor puts a reactivated author's newest stored records back into
// the feeds of its followers, lane by lane, up to each feed's merge limit.
// An author still inactive keeps out of feeds: a listing that finished
// meanwhile (MergeAuthor) must not bring it back.
func (w *txWriter) remergeAuthor(authorID int64) error {
	return w.mergeAuthor(authorID, false)
}

// mergeAuthor is remergeAuthor; with completeOnly, outside index_all mode,
// only into the feeds of followers whose first read is complete: a first
// read still to come builds the feed from what is stored.
func (w *txWriter) mergeAuthor(authorID int64, completeOnly bool) error {
	var active bool
	if _, err := w.queryRow(w.s.stmts.actorActive, []any{authorID}, &active); err != nil {
		return fmt.Errorf("read account status: %w", err)
	}
	if !active {
		return nil
	}
	for i := range w.s.lanes {
		l := &w.s.lanes[i]
		if l.mergeLimit == 0 {
			continue
		}
		q := `INSERT OR IGNORE INTO feed_items (viewer_id, target_id, sort_us, record_id)
			SELECT f.actor_id, ?2, r.sort_us, r.id
			FROM follows f
			JOIN (SELECT id, sort_us FROM records WHERE actor_id = ?1 AND collection_id = ?3
			      ORDER BY sort_us DESC LIMIT ?5) r
			WHERE f.subject_id = ?1 AND f.collection_id = ?4 AND f.actor_id <> ?1`
		args := []any{authorID, l.id, l.collectionID, l.followCollID, l.mergeLimit}
		if !w.s.indexAll {
			if completeOnly {
				q += ` AND EXISTS (SELECT 1 FROM viewers v WHERE v.actor_id = f.actor_id AND v.feed = ?6 AND v.state = 'complete')`
			} else {
				q += ` AND EXISTS (SELECT 1 FROM viewers v WHERE v.actor_id = f.actor_id AND v.feed = ?6)`
			}
			args = append(args, l.feed)
		}
		r, err := w.tx.ExecContext(w.ctx, q, args...)
		if err != nil {
			return fmt.Errorf("re-merge author into feed %s: %w", l.feed, err)
		}
		n, _ := r.RowsAffected()
		w.res.MergedRows += n
		if n > 0 {
			w.grewFollowersOf(authorID, l.collectionID)
		}
	}
	return nil
}
