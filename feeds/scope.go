package feeds

import (
	"fmt"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// The storage scope. In index_all mode everything in the configured
// collections is stored. Otherwise the daemon serves the people who read:
// it stores the follow records of registered viewers and the target records
// of accounts at least one viewer follows, and skips the rest of the
// network cheaply (one cached lookup, no row written, not even an actor
// id), counting it as out of scope.

// followerInScope interns and returns the author of a follow record when
// its follows are stored.
func (w *txWriter) followerInScope(did syntax.DID, followCollID int64) (int64, bool, error) {
	if w.s.indexAll {
		id, err := w.actorID(did)
		return id, err == nil, err
	}
	id, found, err := w.existingActorID(did)
	if err != nil || !found {
		w.countOutOfScope(found, err)
		return 0, false, err
	}
	viewer, err := w.viewsFollows(id, followCollID)
	if err != nil {
		return 0, false, err
	}
	w.countOutOfScope(viewer, nil)
	return id, viewer, nil
}

// viewsFollows reports whether the actor views an enabled feed built from
// the follow collection: only then are its follow records stored.
func (w *txWriter) viewsFollows(actorID, followCollID int64) (bool, error) {
	var one int
	viewer, err := w.queryRow(w.s.stmts.viewerOfFollows, []any{actorID, followCollID}, &one)
	if err != nil {
		return false, fmt.Errorf("check viewer: %w", err)
	}
	return viewer, nil
}

// authorInScope returns the author of a target record when its records are
// stored: someone whose follows are stored follows it.
func (w *txWriter) authorInScope(did syntax.DID) (int64, bool, error) {
	if w.s.indexAll {
		id, err := w.actorID(did)
		return id, err == nil, err
	}
	id, found, err := w.existingActorID(did)
	if err != nil || !found {
		w.countOutOfScope(found, err)
		return 0, false, err
	}
	if w.knownFollowed(id) {
		return id, true, nil
	}
	var one int
	followed, err := w.queryRow(w.s.stmts.followedByAnyone, []any{id}, &one)
	if err != nil {
		return 0, false, fmt.Errorf("check followers: %w", err)
	}
	if followed {
		w.rememberFollowed(id)
	}
	w.countOutOfScope(followed, nil)
	return id, followed, nil
}

func (w *txWriter) countOutOfScope(inScope bool, err error) {
	if err == nil && !inScope {
		w.res.OutOfScope++
	}
}

// registeredFor reports whether the viewer receives the feed; in index_all
// mode everyone does.
func (w *txWriter) registeredFor(viewerID int64, feed string) (bool, error) {
	if w.s.indexAll {
		return true, nil
	}
	var one int
	ok, err := w.queryRow(w.s.stmts.viewerOfFeed, []any{viewerID, feed}, &one)
	if err != nil {
		return false, fmt.Errorf("check viewer registration: %w", err)
	}
	return ok, nil
}

// leaveScopeIfUnfollowed lets an account go once no viewer follows it any
// more: its records stop arriving, so when it comes back into scope its
// backlog must be fetched again rather than left with a hole. Its stored
// target records go too: the stream's deletes and updates of them are
// dropped while it is out of scope, so kept records would come back
// stale or deleted into a later follower's feed. No feed holds them: the
// unfollows that left it unfollowed took its rows out.
func (w *txWriter) leaveScopeIfUnfollowed(subjectID int64) error {
	var one int
	followed, err := w.queryRow(w.s.stmts.followedByAnyone, []any{subjectID}, &one)
	if err != nil {
		return fmt.Errorf("check followers: %w", err)
	}
	if followed {
		return nil
	}
	w.forgetFollowed(subjectID)
	if err := w.dropProfile(subjectID); err != nil {
		return err
	}
	// Follow collections of enabled lanes only: a disabled lane's may be a
	// target now (TestAFormerFollowCollectionNowATargetIsListedAgainAfterLeavingScope).
	if _, err := w.tx.ExecContext(w.ctx, `
		UPDATE listings SET `+reopenListing+`
		WHERE actor_id = ? AND collection_id NOT IN (SELECT follow_collection_id FROM feed_targets WHERE enabled = 1)`,
		subjectID); err != nil {
		return fmt.Errorf("invalidate listings: %w", err)
	}
	ids, err := scanIDs(w.tx.QueryContext(w.ctx, `
		DELETE FROM records WHERE actor_id = ? AND collection_id IN (SELECT collection_id FROM feed_targets)
		RETURNING id`, subjectID))
	if err != nil {
		return fmt.Errorf("drop records of an account out of scope: %w", err)
	}
	for _, id := range ids {
		w.recordChanged(id)
	}
	return nil
}
