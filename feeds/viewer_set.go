package feeds

import (
	"context"
	"database/sql"
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
// table change in the same order. An operator command beside the daemon
// (appview backfill) registers viewers too: every such transaction counts
// in viewer_set_version, and the daemon reloads the set when the version
// moved by other hands (RefreshViewers).
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

// replace swaps in a set loaded afresh.
func (v *viewerSet) replace(m map[uint64]struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.m = m
}

// loadViewers fills the set from the viewers table and notes the version
// of the set (viewer_set_version) it holds. The version is read first,
// outside any transaction (on the writer, a transaction would take the
// write lock for the whole read): a change another process commits
// between the two reads is in the set under the older version, and costs
// one needless reload at the next refresh, never a missed one. It runs
// in Open, on the writer, and in RefreshViewers, on the read pool under
// the write lock, so none of this process's writes commit meanwhile.
func (s *Store) loadViewers(ctx context.Context, db *sql.DB) error {
	var version int64
	if err := db.QueryRowContext(ctx, `SELECT version FROM viewer_set_version`).Scan(&version); err != nil {
		return fmt.Errorf("load viewers: %w", err)
	}
	rows, err := db.QueryContext(ctx, `
		SELECT a.did, v.feed FROM viewers v JOIN actors a ON a.id = v.actor_id`)
	if err != nil {
		return fmt.Errorf("load viewers: %w", err)
	}
	defer rows.Close()
	m := make(map[uint64]struct{})
	for rows.Next() {
		var did, feed string
		if err := rows.Scan(&did, &feed); err != nil {
			return fmt.Errorf("load viewers: %w", err)
		}
		m[s.viewers.key(syntax.DID(did), feed)] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load viewers: %w", err)
	}
	s.viewers.replace(m)
	s.viewerVersion.Store(version)
	return nil
}

// bumpViewerVersion counts a transaction that adds or retires viewers in
// viewer_set_version, before its commit. It returns the version before
// and after.
func (w *txWriter) bumpViewerVersion() (before, after int64, err error) {
	if err := w.tx.QueryRowContext(w.ctx,
		`UPDATE viewer_set_version SET version = version + 1 RETURNING version`).Scan(&after); err != nil {
		return 0, 0, fmt.Errorf("count viewer change: %w", err)
	}
	return after - 1, after, nil
}

// publishViewers applies a committed transaction's viewer changes to the
// set. The set's version moves with them only if nothing else had moved
// it since the set was loaded: a change committed by another process
// (an operator command) leaves the versions apart, and RefreshViewers
// then reloads the set.
func (s *Store) publishViewers(changes []viewerChange, before, after int64) {
	if len(changes) == 0 {
		return
	}
	s.viewers.apply(changes)
	s.viewerVersion.CompareAndSwap(before, after)
}

// RefreshViewers reloads the viewer set when another process registered
// or retired viewers (appview backfill beside the daemon): a point read
// when nothing changed, which is what it nearly always finds. The daemon
// calls it every few seconds (TestAViewerTheBackfillCommandPreparedIsKnownToTheDaemon).
func (s *Store) RefreshViewers(ctx context.Context) (bool, error) {
	var version int64
	if err := s.reader.QueryRowContext(ctx, `SELECT version FROM viewer_set_version`).Scan(&version); err != nil {
		return false, fmt.Errorf("read viewer set version: %w", err)
	}
	if version == s.viewerVersion.Load() {
		return false, nil
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return true, s.loadViewers(ctx, s.reader)
}

// KnownViewer reports whether the actor is registered for the feed. It
// reads memory only: it is the check made before a request for an unknown
// actor is admitted, so it must cost nothing an outsider could multiply.
func (s *Store) KnownViewer(viewer syntax.DID, feed string) bool {
	return s.viewers.has(viewer, feed)
}
