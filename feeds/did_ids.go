package feeds

import "github.com/bluesky-social/indigo/atproto/syntax"

// didIDs maps DIDs to actor ids, bounded in entries and in bytes: past
// either bound it starts over, and the database answers for whatever it
// forgot. Entries alone are no bound on memory, since a DID may be 2 KiB
// and who writes it (a follow's author, a getFeed client) chooses it
// (TestTheActorCacheIsBoundedInBytes, TestViewerIDsAreBoundedInBytes). An
// actor's id never changes and its row is never deleted (a deleted account
// keeps its row, marked), so an entry needs no invalidation. The caller
// guards it.
type didIDs struct {
	ids              map[syntax.DID]int64
	bytes            int // each DID's length plus didEntryOverhead
	maxLen, maxBytes int
}

// didEntryOverhead approximates an entry's bytes beyond its DID's.
const didEntryOverhead = 64

func newDIDIDs(maxLen, maxBytes int) didIDs {
	return didIDs{ids: map[syntax.DID]int64{}, maxLen: maxLen, maxBytes: maxBytes}
}

func (m *didIDs) get(did syntax.DID) (int64, bool) {
	id, ok := m.ids[did]
	return id, ok
}

func (m *didIDs) put(did syntax.DID, id int64) {
	if _, ok := m.ids[did]; ok {
		return
	}
	n := len(did) + didEntryOverhead
	if len(m.ids) >= m.maxLen || m.bytes+n > m.maxBytes {
		m.ids = make(map[syntax.DID]int64, m.maxLen/4)
		m.bytes = 0
	}
	m.ids[did] = id
	m.bytes += n
}
