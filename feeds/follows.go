package feeds

import "fmt"

// applyFollow stores a follow record and keeps the follower's feeds right:
// a new followee's recent records are merged in, an unfollowed one's are
// removed unless another follow record of the same subject remains.
//
// Revs are TIDs and sort as strings; a change whose rev is not newer than
// what is stored (row or tombstone) is a replay and changes nothing.
func (w *txWriter) applyFollow(c *Change, collID int64) error {
	st := w.s.stmts
	actorID, inScope, err := w.followerInScope(c.DID, collID)
	if err != nil || !inScope {
		return err
	}
	var oldSubject int64
	var oldRev string
	found, err := w.queryRow(st.followByKey, []any{actorID, collID, string(c.RKey)}, &oldSubject, &oldRev)
	if err != nil {
		return fmt.Errorf("look up follow: %w", err)
	}

	if c.Op == OpDelete {
		if applies, err := w.buryDelete(actorID, collID, c, found, oldRev); err != nil || !applies {
			return err
		}
		if found {
			if _, err := w.exec(st.deleteFollow, actorID, collID, string(c.RKey)); err != nil {
				return fmt.Errorf("delete follow: %w", err)
			}
			if err := w.unfollowed(actorID, collID, oldSubject); err != nil {
				return err
			}
		}
		w.res.Applied++
		return nil
	}

	if found && oldRev >= c.Rev {
		w.res.Duplicates++
		return nil
	}
	if !found {
		exists, covers, err := w.tombstoned(actorID, collID, c.RKey, c.Rev)
		if err != nil {
			return err
		}
		if covers {
			w.res.Duplicates++
			return nil
		}
		if exists {
			if _, err := w.exec(st.deleteTombstone, actorID, collID, string(c.RKey)); err != nil {
				return fmt.Errorf("clear tombstone: %w", err)
			}
		}
	}
	subjectID, err := w.actorID(c.Subject)
	if err != nil {
		return err
	}
	switch {
	case !found:
		if _, err := w.exec(st.insertFollow, actorID, collID, string(c.RKey), subjectID, c.Rev); err != nil {
			return fmt.Errorf("insert follow: %w", err)
		}
		if err := w.followed(actorID, collID, subjectID); err != nil {
			return err
		}
		if !w.s.indexAll && actorID != subjectID {
			w.res.NewFollows = append(w.res.NewFollows, FollowEdge{Viewer: c.DID, Subject: c.Subject, Collection: c.Collection})
			if err := w.enteredScope(subjectID, collID); err != nil {
				return err
			}
		}
	default:
		if _, err := w.exec(st.updateFollow, actorID, collID, string(c.RKey), subjectID, c.Rev); err != nil {
			return fmt.Errorf("update follow: %w", err)
		}
		if subjectID != oldSubject {
			if err := w.movedFollow(actorID, collID, oldSubject, subjectID); err != nil {
				return err
			}
		}
	}
	w.res.Applied++
	return nil
}

// movedFollow keeps the follower's feeds right when one of its follow
// records changed subject: the old subject's records leave (unless another
// follow of it remains), the new one's are merged in, and the new subject
// may have entered the scope. The stream's update and a listing that
// found the change the stream missed (takeListedSubject) both end here.
func (w *txWriter) movedFollow(actorID, collID, oldSubject, subjectID int64) error {
	if err := w.unfollowed(actorID, collID, oldSubject); err != nil {
		return err
	}
	if err := w.followed(actorID, collID, subjectID); err != nil {
		return err
	}
	if !w.s.indexAll && actorID != subjectID {
		return w.enteredScope(subjectID, collID)
	}
	return nil
}

// followed merges the subject's newest stored records into every lane the
// follow collection feeds. Following yourself is stored but never puts your
// own records in your feed.
func (w *txWriter) followed(viewerID, followCollID, subjectID int64) error {
	if viewerID == subjectID {
		return nil
	}
	for _, l := range w.s.lanesByFollow[followCollID] {
		if l.mergeLimit == 0 {
			continue
		}
		if registered, err := w.registeredFor(viewerID, l.feed); err != nil || !registered {
			if err != nil {
				return err
			}
			continue
		}
		n, err := w.exec(w.s.stmts.merge, viewerID, l.id, subjectID, l.collectionID, l.mergeLimit)
		if err != nil {
			return fmt.Errorf("merge followee into feed %s: %w", l.feed, err)
		}
		w.res.MergedRows += n
		if n > 0 {
			w.grewViewer(viewerID)
		}
	}
	return nil
}

// unfollowed removes the subject's records from the viewer's lanes, unless
// another follow record of the same subject in the same collection remains.
func (w *txWriter) unfollowed(viewerID, followCollID, subjectID int64) error {
	if viewerID == subjectID {
		return nil
	}
	var one int
	remains, err := w.queryRow(w.s.stmts.followRemains, []any{subjectID, followCollID, viewerID}, &one)
	if err != nil {
		return fmt.Errorf("check remaining follows: %w", err)
	}
	if remains {
		return nil
	}
	for _, l := range w.s.lanesByFollow[followCollID] {
		n, err := w.exec(w.s.stmts.unmerge, viewerID, l.id, subjectID, l.collectionID)
		if err != nil {
			return fmt.Errorf("remove followee from feed %s: %w", l.feed, err)
		}
		w.res.RemovedRows += n
	}
	if !w.s.indexAll {
		return w.leaveScopeIfUnfollowed(subjectID)
	}
	return nil
}

// enteredScope notes a viewer's new follow of subjectID (outside index_all
// mode, where only viewers' follows are stored): the subject is in scope
// now, and remembered so (followed_cache.go). One not known to be
// followed before may have just entered the scope, so its listings are
// wanted; one already followed had them marked when it entered, or has
// them stored. The cache does not say through which follow collection:
// with feeds on more than one, an account followed through one and now
// through another has the other's target listings wanted every time
// (wantListing changes nothing where they are due or complete).
func (w *txWriter) enteredScope(subjectID, followCollID int64) error {
	known := w.knownFollowed(subjectID)
	if known && len(w.s.lanesByFollow) <= 1 {
		return nil
	}
	if !known {
		w.rememberFollowed(subjectID)
	}
	return w.wantListings(subjectID, followCollID)
}

// wantListings makes the backlog of an account a viewer started following
// durable work, in the follow's transaction: its target listings that are
// not complete are marked due, so the backfill's retry loop fetches them
// and merges the account into its followers' feeds (DueListings,
// MergeAuthor). The backfill also hears of the follow at once
// (BatchResult.NewFollows), but from a queue in memory: one that was full,
// or a process that stopped first, would otherwise lose the edge, and the
// viewer's feed would never get the account's backlog.
func (w *txWriter) wantListings(subjectID, followCollID int64) error {
	for _, l := range w.s.lanesByFollow[followCollID] {
		if _, err := w.exec(w.s.stmts.wantListing, subjectID, l.collectionID); err != nil {
			return fmt.Errorf("mark listing due: %w", err)
		}
	}
	return nil
}
