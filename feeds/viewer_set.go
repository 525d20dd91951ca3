package feeds

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// viewerSet holds every registered (viewer, feed) pair in memory, so that
// telling a new viewer from an existing one costs no SQLite read: a flood
// of requests for unknown actors is refused by its client's bucket before
// it reaches the database, and existing viewers are never mistaken for
// new ones.
//
// It is filled from the viewers table when the store opens and kept in
// step by the only two writes that add or remove viewers (RegisterViewer,
// RetireViewers) as they commit, under the write lock, so the set and the
// table change in the same order. Only the daemon registers and retires
// viewers; operator commands that open the file beside it do not, so no
// change goes unseen.
//
// Entries are 64-bit hashes under a per-process seed (about 16 bytes a
// viewer, where the DID alone would take 32): a collision, which an
// outsider cannot aim for without the seed and which is unlikely below
// billions of viewers, only lets one unknown actor skip its client's
// bucket; the global cap on first reads still holds.
type viewerSet struct {
	seed maphash.Seed
	mu   sync.RWMutex
	m    map[uint64]struct{}
}

func newViewerSet() *viewerSet {
	return &viewerSet{seed: maphash.MakeSeed(), m: map[uint64]struct{}{}}
}

func (v *viewerSet) key(viewer syntax.DID, feed string) uint64 {
	var h maphash.Hash
	h.SetSeed(v.seed)
	h.WriteString(feed)
	h.WriteByte(0)
	h.WriteString(string(viewer))
	return h.Sum64()
}

func (v *viewerSet) has(viewer syntax.DID, feed string) bool {
	k := v.key(viewer, feed)
	v.mu.RLock()
	defer v.mu.RUnlock()
	_, ok := v.m[k]
	return ok
}

// viewerChange is a viewer a transaction registered (add) or retired.
type viewerChange struct {
	viewer syntax.DID
	feed   string
	add    bool
}

// apply publishes a committed transaction's changes.
func (v *viewerSet) apply(changes []viewerChange) {
	if len(changes) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range changes {
		if c.add {
			v.m[v.key(c.viewer, c.feed)] = struct{}{}
		} else {
			delete(v.m, v.key(c.viewer, c.feed))
		}
	}
}

// loadViewers fills the set from the viewers table. It runs in Open,
// before anything else can register or retire a viewer.
func (s *Store) loadViewers(ctx context.Context) error {
	rows, err := s.writer.QueryContext(ctx, `
		SELECT a.did, v.feed FROM viewers v JOIN actors a ON a.id = v.actor_id`)
	if err != nil {
		return fmt.Errorf("load viewers: %w", err)
	}
	defer rows.Close()
	batch := make([]viewerChange, 0, 1024)
	for rows.Next() {
		var did, feed string
		if err := rows.Scan(&did, &feed); err != nil {
			return fmt.Errorf("load viewers: %w", err)
		}
		batch = append(batch, viewerChange{syntax.DID(did), feed, true})
		if len(batch) == cap(batch) {
			s.viewers.apply(batch)
			batch = batch[:0]
		}
	}
	s.viewers.apply(batch)
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load viewers: %w", err)
	}
	return nil
}

// KnownViewer reports whether the actor is registered for the feed. It
// reads memory only: it is the check made before a request for an unknown
// actor is admitted, so it must cost nothing an outsider could multiply.
func (s *Store) KnownViewer(viewer syntax.DID, feed string) bool {
	return s.viewers.has(viewer, feed)
}
