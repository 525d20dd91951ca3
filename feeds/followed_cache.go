package feeds

// followedAuthors remembers the authors a viewer is known to follow, so
// that a post by one is in scope without a query. Outside index_all mode
// every target record's author is checked (authorInScope), and the
// followedByAnyone query was one statement of the three a stored post
// costs: database/sql starts a goroutine for every query inside a
// transaction, about as much work again as SQLite's own.
//
// Only "followed" is remembered; "not followed" is always asked again, so
// a new follow is seen at once. An entry goes when its author is seen
// leaving scope (leaveScopeIfUnfollowed), which every path that removes
// follows checks for each account it unfollowed: an unfollow, a retired
// viewer, a deleted account. Another process's commit empties it
// (noticeOtherWriters): an operator's command may have taken an author's
// last follow, and a stale entry then both let in the records of an
// author nobody follows and, worse, kept a new follow of it from seeing
// it enter scope again, so its listings were never wanted and its
// backlog could be lost (a review).
//
// It is the writer's state, guarded by writeMu. A transaction's new
// entries are published when it commits (as actor ids are), so a
// rolled-back follow leaves nothing behind.
type followedAuthors map[int64]struct{}

// maxCachedFollowed bounds the cache; past it the cache starts over.
const maxCachedFollowed = 1 << 20

// knownFollowed reports whether the author is remembered as followed,
// by the committed cache or by this transaction.
func (w *txWriter) knownFollowed(authorID int64) bool {
	if _, ok := w.s.followed[authorID]; ok {
		return true
	}
	_, ok := w.newFollowed[authorID]
	return ok
}

// rememberFollowed notes a followed author for publication at commit.
func (w *txWriter) rememberFollowed(authorID int64) {
	if w.newFollowed == nil {
		w.newFollowed = followedAuthors{}
	}
	w.newFollowed[authorID] = struct{}{}
}

// forgetFollowed drops an author who left scope, at once and from this
// transaction's entries too.
func (w *txWriter) forgetFollowed(authorID int64) {
	delete(w.s.followed, authorID)
	delete(w.newFollowed, authorID)
}

// publishFollowed adds a committed transaction's entries.
func (s *Store) publishFollowed(ids followedAuthors) {
	if len(s.followed)+len(ids) > maxCachedFollowed {
		clear(s.followed)
	}
	for id := range ids {
		s.followed[id] = struct{}{}
	}
}
