package directory

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/internal/textclip"
)

// cache holds answers and failures for a while, bounded in size, and makes
// concurrent lookups of one key share one fetch.
type cache[V any] struct {
	now            func() time.Time
	hitTTL, errTTL time.Duration
	timeout        time.Duration
	group          singleflight.Group
	// slots holds a token for each fetch in flight, at most MaxFetches.
	slots chan struct{}

	mu      sync.Mutex
	entries map[string]*list.Element // of *entry[V], on one of the shelves
	// Answers and failures are bounded apart, failures more tightly:
	// anyone can make lookups fail (getFeed resolves any handle a client
	// names), and failures sharing the answers' bound pushed the answers
	// out (TestFailingLookupsDoNotPushAnswersOut).
	answers, failures shelf
	// seq numbers fetches; purgedAt[key] is the seq current when key was
	// purged while a fetch of it was in flight, so fetches that started
	// before the purge do not store what they found.
	seq      uint64
	inflight map[string]int
	purgedAt map[string]uint64
}

// shelf is one list of the cache, oldest stored first: the first evicted,
// and the first checked for expiry
// (TestExpiredEntriesLeaveWithoutBeingLookedUp).
type shelf struct {
	order *list.List
	max   int
}

// answersPerFailure sizes the failures' shelf: a tenth of MaxEntries.
// Failures are kept minutes (ErrTTL), answers an hour, so failures need
// less room; a flood past it pushes out only older failures.
const answersPerFailure = 10

// sweepBatch is how many expired entries a visit to the cache (a lookup
// or a store) drops at most from each shelf: more than the one entry a
// store adds, so a backlog of expired entries shrinks as the cache is
// used, and few enough that no visit walks a whole cache of them under
// the lock (TestExpiredEntriesAreDroppedAFewAtATime).
const sweepBatch = 8

type entry[V any] struct {
	key     string
	val     V
	err     error
	expires time.Time
}

func newCache[V any](cfg Config) *cache[V] {
	return &cache[V]{
		now:      cfg.Now,
		hitTTL:   cfg.HitTTL,
		errTTL:   cfg.ErrTTL,
		timeout:  cfg.Timeout,
		slots:    make(chan struct{}, cfg.MaxFetches),
		entries:  make(map[string]*list.Element),
		answers:  shelf{order: list.New(), max: cfg.MaxEntries},
		failures: shelf{order: list.New(), max: max(1, cfg.MaxEntries/answersPerFailure)},
		inflight: make(map[string]int),
		purgedAt: make(map[string]uint64),
	}
}

// get answers from the cache or runs fetch once for all concurrent callers.
// fetch runs detached from any one caller's cancellation (bounded by the
// cache timeout instead), so a caller giving up neither fails the others nor
// caches a cancellation; each caller still stops waiting when its ctx ends.
func (c *cache[V]) get(ctx context.Context, key string, fetch func(context.Context) (V, error)) (V, error) {
	if e, ok := c.lookup(key); ok {
		return e.val, e.err
	}
	if err := ctx.Err(); err != nil {
		var zero V
		return zero, err
	}
	ch := c.group.DoChan(key, func() (any, error) {
		// A flight that ended between our lookup and DoChan has stored.
		if e, ok := c.lookup(key); ok {
			return e, nil
		}
		// Every fetch is a stranger's DNS name or host, and the handles of
		// getFeed's actor reach here before any admission: past the bound
		// the lookup fails at once, and is not cached, rather than queue
		// sockets and goroutines for as long as a fetch may take
		// (TestLookupsInFlightAreBounded).
		select {
		case c.slots <- struct{}{}:
			defer func() { <-c.slots }()
		default:
			return &entry[V]{key: key, err: ErrBusy}, nil
		}
		seq := c.begin(key)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		defer cancel()
		val, err := fetch(fctx)
		if errors.Is(err, ErrBusy) {
			// A paused service (pause.go) said nothing about the key:
			// not cached, so the first lookup after the pause asks. The
			// error is ours, small, and kept whole for RetryAfter.
			c.end(key, seq, nil)
			return &entry[V]{key: key, err: err}, nil
		}
		e := &entry[V]{key: key, val: val, err: boundError(err)}
		c.end(key, seq, e)
		return e, nil
	})
	select {
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	case r := <-ch:
		e := r.Val.(*entry[V])
		return e.val, e.err
	}
}

func (c *cache[V]) lookup(key string) (*entry[V], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.dropExpired(now)
	el, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry[V])
	if !now.Before(e.expires) {
		c.remove(el)
		return nil, false
	}
	return e, true
}

// dropExpired drops up to sweepBatch expired entries from the oldest end
// of each shelf, so an entry no one asks for again does not stay until
// pushed out. Answers share one TTL, so their shelf is in the order they
// expire; a failure that may pass (kept a quarter of ErrTTL) can wait
// behind older failures, and goes at most ErrTTL after it was stored.
func (c *cache[V]) dropExpired(now time.Time) {
	for _, s := range []*shelf{&c.answers, &c.failures} {
		for range sweepBatch {
			el := s.order.Front()
			if el == nil || now.Before(el.Value.(*entry[V]).expires) {
				break
			}
			c.remove(el)
		}
	}
}

// shelfOf is where e is kept: failures apart from answers.
func (c *cache[V]) shelfOf(e *entry[V]) *shelf {
	if e.err != nil {
		return &c.failures
	}
	return &c.answers
}

func (c *cache[V]) remove(el *list.Element) {
	e := el.Value.(*entry[V])
	c.shelfOf(e).order.Remove(el)
	delete(c.entries, e.key)
}

func (c *cache[V]) begin(key string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.inflight[key]++
	return c.seq
}

// end closes the fetch begun as seq and stores e, unless e is nil or key
// was purged while the fetch ran.
func (c *cache[V]) end(key string, seq uint64, e *entry[V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	purged, wasPurged := c.purgedAt[key]
	if c.inflight[key]--; c.inflight[key] <= 0 {
		delete(c.inflight, key)
		delete(c.purgedAt, key)
	}
	if e == nil || (wasPurged && seq <= purged) {
		return
	}
	ttl := c.hitTTL
	switch {
	case errors.Is(e.err, ErrUnavailable):
		// A failure that may pass is kept a quarter as long: a retry a
		// minute later (the backfill's first) must reach the network
		// (TestAPassingFailureIsCachedBriefly).
		ttl = c.errTTL / 4
	case e.err != nil:
		ttl = c.errTTL
	}
	now := c.now()
	c.dropExpired(now)
	e.expires = now.Add(ttl)
	if el, ok := c.entries[key]; ok {
		c.remove(el) // an answer replaced by a failure changes shelves
	}
	s := c.shelfOf(e)
	c.entries[key] = s.order.PushBack(e)
	for s.order.Len() > s.max {
		c.remove(s.order.Front())
	}
}

// purge drops key and returns the value it held, if any was cached.
func (c *cache[V]) purge(key string) (V, bool) {
	c.group.Forget(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[key] > 0 {
		c.purgedAt[key] = c.seq
	}
	el, ok := c.entries[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.remove(el)
	e := el.Value.(*entry[V])
	return e.val, e.err == nil
}

// purgeAll forgets every entry, and every lookup under way stores nothing.
func (c *cache[V]) purgeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.inflight {
		c.group.Forget(key)
		c.purgedAt[key] = c.seq
	}
	clear(c.entries)
	c.answers.order.Init()
	c.failures.order.Init()
}

// len reports the number of stored entries, expired ones included.
func (c *cache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answers.order.Len() + c.failures.order.Len()
}

// ErrBusy answers a lookup past Config.MaxFetches: it says nothing about
// the identity, only that too many lookups were in flight (it is an
// ErrUnavailable too).
var ErrBusy = fmt.Errorf("%w: too many lookups in flight", ErrUnavailable)

// maxCachedErrorBytes bounds the message of a cached failure. A hostile
// host chooses much of it (a refused redirect's error carries its
// Location, up to the 64 KiB header cap), the cache is bounded by entries
// and not bytes, and it keeps a failure for ErrTTL
// (TestACachedFailureKeepsAShortMessage).
const maxCachedErrorBytes = 512

// kinds are the errors callers tell failures apart by.
var kinds = []error{ErrNotFound, ErrHandleMismatch, ErrInvalidDocument, ErrForbiddenPDS, ErrUnavailable,
	egress.ErrForbiddenAddress, egress.ErrTooLarge, context.DeadlineExceeded, context.Canceled}

// cachedError is a failure as the cache keeps it: its message, cut short,
// and the kinds it was, so errors.Is answers as for the original; nothing
// else of the original is kept.
type cachedError struct {
	msg   string
	kinds []error
}

func (e *cachedError) Error() string   { return e.msg }
func (e *cachedError) Unwrap() []error { return e.kinds }

func boundError(err error) error {
	if err == nil {
		return nil
	}
	e := &cachedError{msg: textclip.Clip(err.Error(), maxCachedErrorBytes)}
	for _, k := range kinds {
		if errors.Is(err, k) {
			e.kinds = append(e.kinds, k)
		}
	}
	return e
}
