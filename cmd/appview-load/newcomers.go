package main

import (
	"fmt"
	"sync"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// newcomers hands out actors the daemon has never registered, each with a
// DID document and follows on the fakes. Most are made before the
// measured phases, so that the load generator's own bookkeeping (a
// document and follow records per actor, on fakes in this process) does
// not compete with the daemon it measures.
//
// An actor refused with 429 or 503 goes back to the pool: the daemon
// refuses before it writes or resolves anything
// (appview.TestAdmissionConfigTakesEffect), so it is still unknown, and
// asking for it again is asking for an unknown actor again.
type newcomers struct {
	w    *world
	mu   sync.Mutex
	free []syntax.DID
	made int
}

// newNewcomers makes n actors ahead of time.
func newNewcomers(w *world, n int) *newcomers {
	p := &newcomers{w: w}
	for range n {
		p.free = append(p.free, p.make())
	}
	return p
}

func (p *newcomers) make() syntax.DID {
	p.mu.Lock()
	p.made++
	did := syntax.DID(fmt.Sprintf("did:plc:newcomer%07d", p.made))
	p.mu.Unlock()
	p.w.addActor(did)
	return did
}

// get takes an unknown actor, making one if none is left.
func (p *newcomers) get() syntax.DID {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		did := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return did
	}
	p.mu.Unlock()
	return p.make()
}

// put returns an actor the daemon refused.
func (p *newcomers) put(did syntax.DID) {
	p.mu.Lock()
	p.free = append(p.free, did)
	p.mu.Unlock()
}
