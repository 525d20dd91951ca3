package feeds

import (
	"cmp"
	"database/sql"
	"fmt"
	"slices"
)

// grownBatch collects, during one ingest batch, whose feeds grew. It is
// written to sweep_grown once, at the end of the batch, so the hot path of
// a fan-out costs one map insert however many viewers it reached.
type grownBatch struct {
	authors map[grownAuthor]struct{}
	viewers map[int64]struct{}
}

// grownAuthor stands for every follower of an author through one follow
// collection: the viewers one fan-out reached.
type grownAuthor struct{ author, followColl int64 }

// grewFollowersOf records that a record of the author in the target
// collection was fanned out: the followers of every lane carrying the
// collection grew.
func (w *txWriter) grewFollowersOf(authorID, targetCollID int64) {
	for i := range w.s.lanes {
		l := &w.s.lanes[i]
		if l.collectionID != targetCollID {
			continue
		}
		w.grown.addAuthor(grownAuthor{authorID, l.followCollID})
	}
}

func (g *grownBatch) addAuthor(a grownAuthor) {
	if g.authors == nil {
		g.authors = map[grownAuthor]struct{}{}
	}
	g.authors[a] = struct{}{}
}

// grewViewer records that a follow merge grew one viewer's feed.
func (w *txWriter) grewViewer(viewerID int64) {
	if w.grown.viewers == nil {
		w.grown.viewers = map[int64]struct{}{}
	}
	w.grown.viewers[viewerID] = struct{}{}
}

// queueGrown writes the batch's grown feeds to the bounded queue inside the
// batch transaction. Entries are written in a fixed order, so a replayed
// stream overflows the queue the same way.
func (w *txWriter) queueGrown() error {
	g := &w.grown
	if len(g.authors) == 0 && len(g.viewers) == 0 {
		return nil
	}
	defer func() { *g = grownBatch{} }()
	if w.s.sweep.opts.grownBudget() == 0 {
		return nil
	}
	st, err := w.s.sweepStatements(w.ctx)
	if err != nil {
		return err
	}
	var size int
	if _, err := w.queryRow(st.grownCount, nil, &size); err != nil {
		return fmt.Errorf("count grown queue: %w", err)
	}
	room := w.s.sweep.opts.GrownLimit - size
	var added, dropped int

	authors := make([]grownAuthor, 0, len(g.authors))
	for a := range g.authors {
		authors = append(authors, a)
	}
	slices.SortFunc(authors, func(a, b grownAuthor) int {
		return cmp.Or(cmp.Compare(a.author, b.author), cmp.Compare(a.followColl, b.followColl))
	})
	for _, a := range authors {
		n, err := w.exec(st.grownAgain, a.author, a.followColl)
		if err != nil {
			return fmt.Errorf("mark grown author: %w", err)
		}
		if n > 0 {
			continue
		}
		if room <= 0 {
			dropped++
			continue
		}
		if _, err := w.exec(st.grownAddAuthor, a.author, a.followColl); err != nil {
			return fmt.Errorf("queue grown author: %w", err)
		}
		room--
		added++
	}

	viewers := make([]int64, 0, len(g.viewers))
	for v := range g.viewers {
		viewers = append(viewers, v)
	}
	slices.Sort(viewers)
	for _, v := range viewers {
		if room <= 0 {
			var one int
			queued, err := w.queryRow(st.grownHasViewer, []any{v}, &one)
			if err != nil {
				return fmt.Errorf("look up grown viewer: %w", err)
			}
			if !queued {
				dropped++
			}
			continue
		}
		n, err := w.exec(st.grownAddViewer, v)
		if err != nil {
			return fmt.Errorf("queue grown viewer: %w", err)
		}
		room -= int(n)
		added += int(n)
	}
	if added > 0 {
		// Set before commit: a rollback leaves it true for nothing, which
		// costs one slice that finds the queue empty.
		w.s.sweep.grownPending = true
	}
	w.s.metrics.observeGrownDropped(dropped)
	return nil
}

// serveGrown walks up to budget queued viewers in queue order, trims them
// and marks them in visited. An author entry is expanded through
// follows_by_subject from its follower cursor, so a fan-out to a million
// viewers is trimmed budget viewers at a time. A viewer already trimmed in
// this slice (a follower of two queued authors) is not trimmed again but
// counts toward the walk, so one slice never walks more than budget.
func (w *txWriter) serveGrown(budget int, visited map[int64]bool, deleted *int64) error {
	st := w.s.sweep.stmts
	walked := 0
	var after int64
	for walked < budget {
		var id, afterID int64
		var viewer, author, coll sql.NullInt64
		var again bool
		found, err := w.queryRow(st.grownNext, []any{after}, &id, &viewer, &author, &coll, &afterID, &again)
		if err != nil {
			return fmt.Errorf("read grown queue: %w", err)
		}
		if !found {
			break
		}
		after = id
		if viewer.Valid {
			if err := w.trimOnce(viewer.Int64, visited, deleted); err != nil {
				return err
			}
			walked++
			if _, err := w.exec(st.grownDone, id); err != nil {
				return fmt.Errorf("dequeue grown viewer: %w", err)
			}
			continue
		}
		want := budget - walked
		followers, err := w.followersAfter(author.Int64, coll.Int64, afterID, want)
		if err != nil {
			return err
		}
		for _, v := range followers {
			if err := w.trimOnce(v, visited, deleted); err != nil {
				return err
			}
		}
		walked += len(followers)
		switch {
		case len(followers) == want:
			_, err = w.exec(st.grownAdvance, id, followers[len(followers)-1])
		case again:
			_, err = w.exec(st.grownRequeue, id)
		default:
			_, err = w.exec(st.grownDone, id)
		}
		if err != nil {
			return fmt.Errorf("update grown author: %w", err)
		}
	}
	return nil
}

// trimOnce trims a viewer unless this slice already did.
func (w *txWriter) trimOnce(viewerID int64, visited map[int64]bool, deleted *int64) error {
	if visited[viewerID] {
		return nil
	}
	n, err := w.trimViewer(viewerID)
	if err != nil {
		return err
	}
	*deleted += n
	visited[viewerID] = true
	return nil
}

func (w *txWriter) followersAfter(author, followColl, after int64, limit int) ([]int64, error) {
	ids, err := w.queryIDs(w.s.sweep.stmts.grownFollowers, author, followColl, after, limit)
	if err != nil {
		return nil, fmt.Errorf("expand grown author: %w", err)
	}
	return ids, nil
}
