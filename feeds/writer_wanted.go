package feeds

import (
	"context"
	"sync/atomic"
	"time"
)

// A catch-up's batch is one transaction applied in parts (OpenBatch) and
// holds the write lock from its first part to its commit, up to
// catchup_batch_size events or ten seconds (appview/ingest.go). The
// process's other writers wait for all of it. Most can: a followee's
// backfill, a fetched profile, the last reads of reads already served.
// Some hold a request: a new viewer's registration and its first read,
// which getFeed waits on for up to backfill.first_read_wait (3 s) before
// it serves whatever the feed holds, and a notifyOfUpdate call. Behind a
// whole batch their writes waited 5.5 s at the median (docs/benchmarks.md,
// twenty-sixth round), and a first read is several writes in a row.
//
// So a request's writes are marked (Urgent): they say they are waiting
// (lockWriter), and the ingester commits its open batch at the change it
// is applying (WriterWanted, OpenBatch.AddUntil): they wait for that
// change, the fan-out of the part so far and the commit, about 70 ms on
// average at 10,000 viewers (docs/benchmarks.md, twenty-eighth round),
// where waiting for the whole part took up to a second. A listing a
// followee's backfill started is marked when a first read joins it
// (Shared). Unmarked writes do not cut batches: the stream's own follows
// start a followee's backfill for every viewer who follows someone new,
// and when their writes cut batches, a catch-up's batches fell to one
// part each.
//
// A part stops at once only five times a second, and beyond that after it
// has run 10 ms (the ingester's stopAfterProgress): stopping at once every
// time, urgent writes that came back to back (registrations in a loop) cut
// a catch-up to about one change a commit (368–896 commits for a
// 3,000-event backlog against 30). A stopped part's rest holds events the
// commit's cursor must not cover; the ingester carries that cursor to the
// first later stop that leaves nothing at or before it, so the cursor
// moves even when no part runs to its end.
//
// The ingester's own writes (the sweep tick after a commit, a cursor
// reset) are not counted: they run between its batches anyway. Its next
// batch and tick make way for the waiting writers first (makeWay).

// urgentKey marks a context whose writes a request waits on, or may come
// to wait on (an *Urgency).
type urgentKey struct{}

// Urgency marks the writes of a run a request may join after it began:
// backfill's listing of an account, started for a followee's backfill
// (which no request waits on) and joined by a new viewer's first read
// (which getFeed waits on). Its writes are urgent from the time it is
// raised: one already waiting for the lock then waits as it began, the
// next ones cut a catch-up's batch.
type Urgency struct{ raised atomic.Bool }

// urgent is the Urgency of every context marked by Urgent.
var urgent = func() *Urgency {
	u := &Urgency{}
	u.raised.Store(true)
	return u
}()

// Urgent marks ctx's writes as ones a request is waiting on: a catch-up's
// open batch commits early for them.
func Urgent(ctx context.Context) context.Context {
	return context.WithValue(ctx, urgentKey{}, urgent)
}

// Shared marks ctx's writes with a new Urgency for a run others may join,
// raised at once if ctx is Urgent.
func Shared(ctx context.Context) (context.Context, *Urgency) {
	u := &Urgency{}
	u.RaiseFor(ctx)
	return context.WithValue(ctx, urgentKey{}, u), u
}

// RaiseFor raises u if ctx is Urgent: a request joined the run u marks.
func (u *Urgency) RaiseFor(ctx context.Context) {
	if isUrgent(ctx) {
		u.raised.Store(true)
	}
}

// Raised says whether u's writes are urgent.
func (u *Urgency) Raised() bool { return u.raised.Load() }

// isUrgent says whether ctx's writes are urgent (Urgent, or Shared and
// raised).
func isUrgent(ctx context.Context) bool {
	u, _ := ctx.Value(urgentKey{}).(*Urgency)
	return u != nil && u.Raised()
}

// lockWriter takes writeMu for a write under ctx, saying it is waiting
// when ctx is Urgent, and times the wait
// (appview_database_write_lock_wait_seconds).
func (s *Store) lockWriter(ctx context.Context) {
	start := time.Now()
	urgent := isUrgent(ctx)
	if urgent {
		s.writersWaiting.Add(1)
	}
	s.writeMu.Lock()
	if urgent {
		s.writersWaiting.Add(-1)
	}
	s.metrics.observeWriteWait(urgent, time.Since(start))
}

// WriterWanted says whether an urgent writer in the process is waiting for
// the write lock: an open catch-up batch (OpenBatch) is to commit without
// waiting for its next part.
func (s *Store) WriterWanted() bool {
	return s.writersWaiting.Load() > 0
}

// maxMakeWay bounds how long the ingester's next batch or sweep tick waits
// for the process's waiting writers to take the write lock: writers that
// keep coming (many viewers' first reads at once) must not hold the
// stream off.
const maxMakeWay = 100 * time.Millisecond

// makeWay lets the urgent writers waiting for the lock take it before the
// ingester does again. sync.Mutex hands its lock to a waiter only once the
// waiter has waited a millisecond or more; until then the goroutine that
// unlocked it can take it back first, and a catch-up's next batch, opened
// right after the commit that made way, often would.
func (s *Store) makeWay() {
	for deadline := time.Now().Add(maxMakeWay); s.WriterWanted() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
}
