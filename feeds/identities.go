package feeds

import (
	"sync"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// maxIdentityLog bounds the accounts whose last identity event is
// remembered; past it they are forgotten at once and every check from
// before that moment counts as raced.
const maxIdentityLog = 100_000

// identityLog orders identity events against profile fetches. A fetch
// resolves a handle, then stores it; an identity event committed in
// between forgot the handle (forgetHandles), and storing the one resolved
// before it would bring the old handle back for good. The fetch takes a
// sequence number before resolving, and its handle is stored only if no
// identity event of the account was committed after it.
type identityLog struct {
	mu    sync.Mutex
	seq   uint64
	last  map[syntax.DID]uint64 // the seq at each account's latest event
	floor uint64                // events up to here were forgotten
}

// IdentitySeq is the position a handle check starts from: pass it back in
// FetchedProfile.IdentitySeq.
func (s *Store) IdentitySeq() uint64 {
	l := &s.identities
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// changed records committed identity events.
func (l *identityLog) changed(dids []syntax.DID) {
	if len(dids) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	switch {
	case l.last == nil:
		l.last = map[syntax.DID]uint64{}
	case len(l.last)+len(dids) > maxIdentityLog:
		// Forget the earlier events: a check from before them may have
		// missed one.
		l.last, l.floor = map[syntax.DID]uint64{}, l.seq-1
	}
	for _, d := range dids {
		l.last[d] = l.seq
	}
}

// changedSince reports whether an identity event of did may have been
// committed after position seq.
func (l *identityLog) changedSince(did syntax.DID, seq uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return seq < l.floor || l.last[did] > seq
}

// forgetAll counts every check begun so far as raced: a gap lost the
// identity events no log can list.
func (l *identityLog) forgetAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	l.last, l.floor = map[syntax.DID]uint64{}, l.seq
}
