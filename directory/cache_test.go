package directory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/internal/testclock"
)

// getFeed resolves any handle a client names, and a failure is cached as
// an answer is. With one bound for both, a client naming bogus DIDs and
// handles pushed the good answers out, each then resolved again (raised
// by a review). Failures have their own, smaller bound: a flood pushes
// out only other failures, and the latest failures stay cached.
func TestFailingLookupsDoNotPushAnswersOut(t *testing.T) {
	plc := startPLC(t)
	plc.Add(alice, "alice.test", pds1)
	plc.Add(bob, "bob.test", pds2)
	const maxEntries = 20
	d, _ := newTestDirectory(t, plc, func(c *Config) { c.MaxEntries = maxEntries })
	ctx := t.Context()
	for _, h := range []syntax.Handle{"alice.test", "bob.test"} {
		if _, err := d.LookupHandle(ctx, h); err != nil {
			t.Fatal(err)
		}
	}

	var lastDID syntax.DID
	for i := range 5 * maxEntries {
		lastDID = syntax.DID(fmt.Sprintf("did:plc:bogus%019d", i))
		if _, err := d.LookupDID(ctx, lastDID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: got %v, want ErrNotFound", lastDID, err)
		}
		h := syntax.Handle(fmt.Sprintf("bogus%d.test", i))
		if _, err := d.LookupHandle(ctx, h); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: got %v, want ErrNotFound", h, err)
		}
	}

	for name, c := range map[string]interface{ failuresStored() int }{"DID": d.docs, "handle": d.handles} {
		if n := c.failuresStored(); n == 0 || n >= maxEntries {
			t.Errorf("the %s cache keeps %d failures, want some and fewer than the %d answers it may keep", name, n, maxEntries)
		}
	}

	docs, handles := plc.Requests(), plc.HandleRequests()
	for _, h := range []syntax.Handle{"alice.test", "bob.test"} {
		if _, err := d.LookupHandle(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if got, gotH := plc.Requests()-docs, plc.HandleRequests()-handles; got != 0 || gotH != 0 {
		t.Errorf("after a flood of failing lookups, two cached answers took %d document and %d handle requests, want none", got, gotH)
	}
	docs = plc.Requests()
	if _, err := d.LookupDID(ctx, lastDID); !errors.Is(err, ErrNotFound) || plc.Requests() != docs {
		t.Errorf("the latest failure was not answered from the cache: %v", err)
	}
}

// An expired entry no one asks for again used to stay until pushed out,
// so a cache filled once stayed full. Each visit to the cache (a lookup,
// a store) now drops expired entries from the oldest end.
func TestExpiredEntriesLeaveWithoutBeingLookedUp(t *testing.T) {
	c, clk := newTestCache(t, 100)
	store(t, c, "a", nil)
	store(t, c, "b", nil)
	store(t, c, "x", ErrNotFound)

	clk.Advance(c.errTTL)
	store(t, c, "c", nil)
	if c.isStored("x") || c.len() != 3 {
		t.Fatalf("after ErrTTL and a store: %d entries, the failure stored: %v; want 3, false", c.len(), c.isStored("x"))
	}

	clk.Advance(c.hitTTL - c.errTTL)
	if _, ok := c.lookup("c"); !ok {
		t.Fatal("an answer stored ErrTTL ago has gone")
	}
	if c.isStored("a") || c.isStored("b") || c.len() != 1 {
		t.Fatalf("after HitTTL and a lookup: %d entries, want only the answer still fresh", c.len())
	}
}

// Expired entries are dropped a few at a time: a visit does not walk a
// backlog of expired entries under the lock (the whole cache, after an
// hour without stores), yet the backlog is soon gone.
func TestExpiredEntriesAreDroppedAFewAtATime(t *testing.T) {
	const backlog = 1000
	c, clk := newTestCache(t, backlog)
	for i := range backlog {
		store(t, c, fmt.Sprint(i), nil)
	}
	clk.Advance(c.hitTTL)

	c.lookup("absent")
	if n := c.len(); n == backlog || n == 0 {
		t.Fatalf("one lookup left %d of %d expired entries; want some dropped, not all", n, backlog)
	}
	for range backlog / 2 {
		c.lookup("absent")
	}
	if n := c.len(); n != 0 {
		t.Fatalf("%d lookups left %d expired entries", backlog/2+1, n)
	}
}

func newTestCache(t *testing.T, maxEntries int) (*cache[string], *testclock.Clock) {
	t.Helper()
	clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return newCache[string](Config{
		HitTTL:     time.Hour,
		ErrTTL:     2 * time.Minute,
		MaxEntries: maxEntries,
		MaxFetches: 1,
		Timeout:    time.Second,
		Now:        clk.Now,
	}), clk
}

// store caches err, or an answer when err is nil, for key.
func store(t *testing.T, c *cache[string], key string, err error) {
	t.Helper()
	_, got := c.get(t.Context(), key, func(context.Context) (string, error) { return "answer for " + key, err })
	if !errors.Is(got, err) {
		t.Fatalf("%s: got %v, want %v", key, got, err)
	}
}

// isStored reports whether key is held, expired or not, without the
// lookup that would drop it.
func (c *cache[V]) isStored(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[key]
	return ok
}

// failuresStored counts the cached failures, expired ones included.
func (c *cache[V]) failuresStored() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, el := range c.entries {
		if el.Value.(*entry[V]).err != nil {
			n++
		}
	}
	return n
}
