package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// maxViewerIDs bounds the ids a Store remembers (about 100 bytes each):
// every registered viewer of a large deployment, while in index_all mode
// a stream of pages for arbitrary accounts cannot grow it past that.
const maxViewerIDs = 200_000

// maxViewerIDBytes bounds the same ids in bytes: a viewer's DID is the
// client's, up to 2 KiB, so 200,000 of them held 400 MiB; 200,000 did:plc
// viewers (32 bytes) still fit.
const maxViewerIDBytes = 20 << 20

// viewerIDs remembers the actor id of each viewer a page was read for
// (the writer's own cache of interned ids, Store.actorIDs, is the
// writer's alone). An actor's id never changes and its row is never
// deleted (a deleted account keeps its row, marked), so an id once read
// is right for good and needs no invalidation. A page then seeks
// feed_items by id instead of first descending the actors index by DID,
// which at full size and after every commit's reset of the read
// connections' caches ends in a pread (docs/benchmarks.md, twenty-first
// round).
type viewerIDs struct {
	mu  sync.RWMutex
	ids didIDs
}

func (v *viewerIDs) get(did syntax.DID) (int64, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.ids.get(did)
}

// put remembers a copy of did: the caller's is usually a slice of the
// request's query string (url.ParseQuery), up to the server's 256 KB of
// headers, which a remembered slice would keep alive
// (TestARememberedViewerIDKeepsNoneOfTheRequest).
func (v *viewerIDs) put(did syntax.DID, id int64) {
	did = syntax.DID(strings.Clone(string(did)))
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ids.put(did, id)
}

// viewerActorID returns the id of the viewer's actor row; found is false
// for an actor the store has never seen, whose feed is empty.
func (s *Store) viewerActorID(ctx context.Context, viewer syntax.DID) (id int64, found bool, err error) {
	if id, ok := s.viewerIDs.get(viewer); ok {
		return id, true, nil
	}
	err = s.reads.viewerID.QueryRowContext(ctx, string(viewer)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("look up viewer: %w", err)
	}
	s.viewerIDs.put(viewer, id)
	return id, true, nil
}
