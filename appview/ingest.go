package appview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atfeeds/appview/failpoint"
	"github.com/atfeeds/appview/feeds"
	"github.com/atfeeds/appview/jetstream"
)

// ingester turns the consumer's events into batches: it flushes at
// batchSize events or batchInterval after the first event of a batch,
// whichever comes first (both stretched while the writer is busy:
// waitAfter), and each flush is one transaction carrying the
// cursor of the events it holds. A frame the consumer dropped (malformed,
// hostile) never reaches it; the next event's position passes over it, so
// junk never stalls the cursor.
type ingester struct {
	store     *feeds.Store
	batchSize int
	// catchupSize is how far a batch may grow past batchSize while the
	// queue still holds events: a backlog is applied in large commits, a
	// live stream in small, prompt ones.
	catchupSize int
	// partSize is how many events of a backlog's batch are taken off the
	// queue before they are applied to its open transaction
	// (feeds.OpenBatch); 0 applies every batch whole. The batch commits at
	// catchupSize or where the queue runs dry (or, when an urgent writer
	// waits, at the change being applied: feeds.Store.WriterWanted,
	// feeds.OpenBatch.AddUntil), holding no more than a part's decoded
	// events, and the consumer's
	// read loop, which waits while the queue is full, waits on a part, not
	// on the whole batch (past jetstream.Config.StallTimeout it steps away
	// from its connection).
	partSize int
	// partTime, when set, is how long a part should take to apply: each
	// part's size follows from the last one's time (adaptPart), up to
	// partSize. partLimit is the next part's size (0: partSize).
	partTime  time.Duration
	partLimit int
	// partStop is what a part asks before each change whether to stop
	// there; nil is store.WriterWanted (tests wrap it to bring a writer
	// in while a part is applied).
	partStop func() bool
	// stops holds the times of the last freeStops stops of a part for an
	// urgent writer, oldest at nextStop (stopAfterProgress).
	stops    [freeStops]time.Time
	nextStop int
	// urgentUntil: a batch was cut for an urgent writer, and until then
	// parts take urgentPartTime (partTimeNow).
	urgentUntil time.Time
	// cutForWriters counts the backlog's batches committed early for an
	// urgent writer (nil: not counted); stopsAtOnce and stopsAfterMinimum
	// count the parts among them that stopped at the change in hand, and
	// after minStopTime (stopAfterProgress).
	cutForWriters, stopsAtOnce, stopsAfterMinimum prometheus.Counter
	// backlogBytes bounds the record bytes of a batch applied in parts;
	// 0 is maxBacklogBytes. backlogHold bounds how long it stays open; 0
	// is maxBacklogHold.
	backlogBytes  int
	backlogHold   time.Duration
	batchInterval time.Duration
	// maxInterval bounds how far a live batch's wait stretches while the
	// writer is busy (waitAfter); interval is the wait the next batch
	// gets, in nanoseconds, read by the metrics.
	maxInterval time.Duration
	interval    atomic.Int64
	log         *slog.Logger
	// afterCommit, when set, is told about every committed batch (the
	// prune sweep ticks on it).
	afterCommit func(feeds.BatchResult)
	// identityChanged, when set, is told about identity events so cached
	// handles and PDS endpoints are re-resolved: the account, and the
	// handle the event names (empty if none), whose cached resolution may
	// point at the account that held it before.
	identityChanged func(did syntax.DID, handle string)
	// restart reconnects the consumer after an operator reset the cursor;
	// it returns the first session whose events count again.
	restart    func() uint64
	minSession uint64
	// consumed, when set, hears of every event taken off the queue, so the
	// consumer can bound the queue's bytes (queueBytes).
	consumed func(*jetstream.Event)
	// sweepIdle is how often an idle stream still ticks the prune sweep.
	sweepIdle time.Duration
	now       func() time.Time
}

// tick runs one prune-sweep tick; a sweep failure is our own state broken.
// A tick that found the write lock held by another process stops there
// (and says so): what it had not committed is left for the next tick,
// which goes on from the sweep's cursor. The slice may have run before
// retention or the vacuum met the lock, so the log says how many feeds
// it trimmed.
func (in *ingester) tick(ctx context.Context, mutated bool, events int, rows int64) (feeds.SweepResult, error) {
	res, err := in.store.SweepTick(ctx, feeds.Tick{Now: in.now(), Mutated: mutated, Events: events, Rows: rows})
	if errors.Is(err, feeds.ErrWriteBusy) {
		in.log.Warn("sweep tick cut short: another process holds the database's write lock",
			"viewers_trimmed", res.Viewers)
		return feeds.SweepResult{LockWait: res.LockWait}, nil
	}
	if err != nil {
		return res, fmt.Errorf("sweep: %w", err)
	}
	return res, nil
}

// followReset adopts an operator's cursor reset on an idle stream, which
// commits no batch to meet it (feeds.Store.FollowCursorReset), and
// reconnects from the reset position. It runs only with no batch open:
// events of an open batch came before the reset, and adopting under them
// would let their commit write the old position over the reset. A write
// lock held by another process skips it; the next idle tick tries again.
func (in *ingester) followReset(ctx context.Context) error {
	if in.restart == nil {
		return nil
	}
	reset, err := in.store.FollowCursorReset(ctx)
	if errors.Is(err, feeds.ErrWriteBusy) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("follow a cursor reset: %w", err)
	}
	if reset {
		in.minSession = in.restart()
		in.log.Warn("stream cursor was reset: reconnecting from it", "time_us", in.store.Cursor().TimeUS)
	}
	return nil
}

// busyAttemptsAtShutdown bounds how long a shutdown's last batch waits
// for a write lock another process holds: each attempt waits the busy
// timeout (5 s).
const busyAttemptsAtShutdown = 3

// Run consumes events until ctx ends, then commits what it holds and
// returns nil. A failed commit is our own state broken: it is returned and
// stops the daemon. A last batch a stop gives up on behind another
// process's write lock (busyAttemptsAtShutdown) wrote nothing, and is
// replayed at the next start: Run returns nil.
func (in *ingester) Run(ctx context.Context, events <-chan jetstream.Event) error {
	if err := in.run(ctx, events); !errors.Is(err, errStoppedBusy) {
		return err
	}
	return nil
}

func (in *ingester) run(ctx context.Context, events <-chan jetstream.Event) error {
	// Writes run to completion even when ctx ends: a transaction cut off
	// by cancellation fails and would turn a clean shutdown into an error.
	// ctx only decides when the loop stops; each write is short.
	writeCtx := context.WithoutCancel(ctx)
	batch := &feeds.Batch{Changes: make([]feeds.Change, 0, in.batchSize)}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	pending := false // the batch holds something, if only a cursor move
	// idle ticks the sweep when no batch has committed for a while, so a
	// due recovery pass or queued grown feeds are served on a quiet stream.
	idle := time.NewTimer(in.sweepIdle)
	defer idle.Stop()
	batchBytes := 0 // of the records the batch holds
	// open is a backlog's transaction with parts of the batch applied
	// (applyPart), nil when none is; applied counts their changes,
	// appliedBytes their records' bytes.
	var open *feeds.OpenBatch
	var opened time.Time
	applied, appliedBytes := 0, 0
	// covered is the cursor of the events the open transaction holds in
	// full: those of its parts applied to the end. A part stopped for an
	// urgent writer commits with it.
	var covered feeds.StreamCursor
	// carried is the cursor of the events taken when a part last stopped,
	// not yet stored: the stopped part's rest, still in the batch, lies at
	// or before it. A later stop stores it once the batch holds nothing at
	// or before it (heldAtOrBefore): under urgent writes that keep coming,
	// parts may stop again and again and none run to its end, and the
	// cursor still moves.
	var carried feeds.StreamCursor
	stopping := ctx.Done()
	// clearBatch empties the batch's slices, keeping its cursor. Cleared,
	// not only cut: the slices are reused, and a catch-up batch's elements
	// would keep its records' bytes (up to maxBatchBytes) reachable until
	// later batches wrote over them.
	clearBatch := func() {
		batchBytes = 0
		clear(batch.Changes)
		clear(batch.Accounts)
		clear(batch.Identities)
		batch.Changes = batch.Changes[:0]
		batch.Accounts = batch.Accounts[:0]
		batch.Identities = batch.Identities[:0]
	}
	// waitWrite runs a write that begins the batch's transaction, waiting
	// out a write lock another process holds (retryWhileBusy). Given up
	// only once the daemon stops: nothing of the batch was written and its
	// cursor did not move, so the next start replays it. A clean stop
	// (errStoppedBusy), not a failure.
	waitWrite := func(write func() error) error {
		err := retryWhileBusy(stopping, busyAttemptsAtShutdown, in.log, "ingest", write)
		if errors.Is(err, feeds.ErrWriteBusy) {
			in.log.Warn("stopping with the last batch uncommitted: another process holds the database's write lock; its events are replayed at the next start",
				"changes", applied+len(batch.Changes), "time_us", batch.Cursor.TimeUS)
			return errStoppedBusy
		}
		if err != nil {
			return fmt.Errorf("ingest batch: %w", err)
		}
		return nil
	}
	// applyPart applies what the batch holds to its open transaction,
	// opening it first. It stops part way when an urgent writer waits
	// (feeds.OpenBatch.AddUntil), leaving the rest in the batch, and says
	// so: the transaction is then to be committed with covered.
	applyPart := func(ctx context.Context) (stopped bool, err error) {
		if open == nil {
			err := waitWrite(func() (err error) {
				open, err = in.store.BeginBatch(ctx, true)
				return err
			})
			if err != nil {
				return false, err
			}
			opened = in.now()
		}
		started := in.now()
		n := len(batch.Changes)
		stop := in.partStop
		if stop == nil {
			stop = in.store.WriterWanted
		}
		stopped, err = open.AddUntil(batch, in.stopAfterProgress(stop, started))
		if err != nil {
			open.Rollback()
			open = nil
			return false, fmt.Errorf("ingest batch: %w", notBusy(err))
		}
		done := n // stopped, the batch holds the changes not applied
		if stopped {
			done = n - len(batch.Changes)
		}
		in.adaptPart(done, in.now().Sub(started))
		applied += done
		if stopped {
			left := 0
			for i := range batch.Changes {
				left += len(batch.Changes[i].Record)
			}
			appliedBytes += batchBytes - left
			batchBytes = left
			return true, nil
		}
		appliedBytes += batchBytes
		covered = batch.Cursor
		carried = feeds.StreamCursor{} // covered passes it
		clearBatch()
		return false, nil
	}
	// commit commits the batch: in one transaction, or as the last part
	// of the open one. A write lock another process holds is waited out
	// only before anything of the batch is written.
	commit := func(ctx context.Context) (feeds.BatchResult, error) {
		if open == nil {
			return in.store.ApplyBatch(ctx, batch)
		}
		o := open
		open = nil
		if err := o.Add(batch); err != nil {
			o.Rollback()
			return feeds.BatchResult{}, notBusy(err)
		}
		res, err := o.Commit(batch.Cursor)
		return res, notBusy(err)
	}
	// committed does what follows a batch's commit: a cursor reset's
	// reconnect, the sweep's tick for its events, the next wait. started
	// is when the commit's attempt began.
	committed := func(ctx context.Context, res feeds.BatchResult, started time.Time, live bool, events int) error {
		failpoint.Hit(failpoint.IngestAfterCommit)
		if res.CursorReset && in.restart != nil {
			// The events still queued come from before the reset: drop
			// them and read again from the reset position.
			in.minSession = in.restart()
			in.log.Warn("stream cursor was reset: reconnecting from it", "time_us", in.store.Cursor().TimeUS)
		}
		if in.afterCommit != nil {
			in.afterCommit(res)
		}
		// The slice visits the batch's share of the sweep's pace per event
		// (sweep.actors per batch_size events): a catch-up batch of 60
		// batches' worth 60 budgets, a live batch of 100 events a tenth of
		// one; and no fewer than the rows it wrote ask for
		// (feeds.Tick.Rows).
		swept, err := in.tick(ctx, res.MutatedFeeds(), max(events, 1), res.FanoutRows+res.MergedRows)
		if err != nil {
			return err
		}
		in.interval.Store(int64(in.waitAfter(live, in.now().Sub(started)-res.LockWait-swept.LockWait)))
		idle.Reset(in.sweepIdle)
		applied, appliedBytes = 0, 0
		covered = feeds.StreamCursor{}
		return nil
	}
	// flush commits the batch. live says it was a live stream's (its wait
	// ran out before it filled, with little queued behind it); with its
	// apply time, that sets the next batch's wait (waitAfter).
	flush := func(ctx context.Context, live bool) error {
		timer.Stop()
		if !pending {
			return nil
		}
		// A write lock held by another process (an operator command's long
		// transaction) fails the batch before anything of it is written:
		// it is tried again rather than stopping the daemon
		// (TestIngestWaitsOutAWriteLockHeldElsewhere).
		// The apply time that may stretch the next batch's wait counts
		// the attempt that succeeded and the sweep tick after it, less
		// their waits for the write lock: waiting behind another writer
		// is not a busy writer.
		var started time.Time
		var res feeds.BatchResult
		err := waitWrite(func() (err error) {
			started = in.now()
			res, err = commit(ctx)
			return err
		})
		if err != nil {
			return err
		}
		if err := committed(ctx, res, started, live, applied+len(batch.Changes)); err != nil {
			return err
		}
		clearBatch()
		batch.Cursor = feeds.StreamCursor{}
		batch.Backlog = false
		carried = feeds.StreamCursor{}
		pending = false
		return nil
	}
	// cutPart commits the open transaction for an urgent writer that
	// stopped a part or came between parts. Its cursor is that of the
	// parts applied in full, or the one carried from an earlier stop once
	// nothing at or before it is left: a stopped part's changes are
	// written but not covered (a crash replays them, and a replay changes
	// nothing). What was not applied (the part's rest, the events taken
	// since the last part) stays in the batch, which goes on filling from
	// the queue.
	cutPart := func(ctx context.Context) error {
		o := open
		open = nil
		cursor := covered
		if carried.TimeUS > cursor.TimeUS && !heldAtOrBefore(batch, carried.TimeUS) {
			cursor = carried
			carried = feeds.StreamCursor{}
		}
		started := in.now()
		res, err := o.Commit(cursor)
		if err != nil {
			return fmt.Errorf("ingest batch: %w", notBusy(err))
		}
		failpoint.Hit(failpoint.IngestAfterCut)
		if err := committed(ctx, res, started, false, applied); err != nil {
			return err
		}
		if res.CursorReset {
			// The rest came from before the reset, as the queued
			// events did.
			clearBatch()
			batch.Cursor = feeds.StreamCursor{}
			batch.Backlog = false
			carried = feeds.StreamCursor{}
			pending = false
			timer.Stop()
			return nil
		}
		if carried.TimeUS == 0 {
			carried = batch.Cursor
		}
		// The rest is a batch of its own now, due within a wait like
		// any other: the queue may have run dry, and the timer of the
		// batch it was part of may have fired while parts were applied.
		timer.Reset(in.currentInterval())
		return nil
	}
	add := func(ev *jetstream.Event) {
		if in.consumed != nil {
			in.consumed(ev)
		}
		if ev.Session < in.minSession {
			return
		}
		if !pending {
			timer.Reset(in.currentInterval())
			pending = true
		}
		addEvent(batch, ev)
		if ev.Commit != nil {
			batchBytes += len(ev.Commit.Record)
		}
		if ev.Kind == jetstream.KindIdentity && in.identityChanged != nil {
			handle := ""
			if ev.Identity != nil {
				handle = ev.Identity.Handle
			}
			in.identityChanged(ev.DID, handle)
		}
	}
	// stop commits the open batch with what the read loop already queued,
	// up to batchSize events of it, with a context that survives the
	// shutdown. While catching up the queue holds a backlog (up to
	// queue_size events) whose commit could outlast a service manager's
	// stop timeout; what is left is replayed at the next start.
	stop := func() error {
		for taken := 0; taken < in.batchSize; taken++ {
			select {
			case ev := <-events:
				add(&ev)
			default:
				return flush(writeCtx, false)
			}
		}
		return flush(writeCtx, false)
	}
	for {
		// Checked first: a select picks among ready cases at random, and
		// a stopping daemon should not go on filling a catch-up batch.
		if ctx.Err() != nil {
			return stop()
		}
		select {
		case <-ctx.Done():
			return stop()
		case ev := <-events:
			add(&ev)
			// A batch opened on a queue holding a batch_size or more is
			// a backlog's: its commit may leave the WAL unchecked longer
			// (feeds.Batch.Backlog). Live, the queue holds what arrived
			// while the last batch was applied, far less.
			if len(events) >= in.batchSize {
				batch.Backlog = true
			}
			queued := len(events)
			total := applied + len(batch.Changes)
			switch {
			case open != nil && queued == 0, in.backlogFull(appliedBytes + batchBytes),
				open != nil && in.now().Sub(opened) >= in.holdLimit():
				// The backlog ran dry under an open transaction (committed
				// now rather than hold the write lock through the wait),
				// or its batch holds records enough, or has held the write
				// lock long enough.
				if err := flush(writeCtx, false); err != nil {
					return err
				}
			case open != nil && in.store.WriterWanted():
				// An urgent writer waits for the lock (a new viewer's
				// registration, a first read's page), and came after the
				// last part ended: the open transaction commits what it
				// holds, and the events taken since that part stay in the
				// batch, as a stopped part's rest does
				// (feeds/writer_wanted.go). It waits for the commit, not
				// for them to be applied too.
				if err := cutPart(writeCtx); err != nil {
					return err
				}
				if in.cutForWriters != nil {
					in.cutForWriters.Inc()
				}
				in.urgentCut()
			case in.partFull(batch, queued, total, batchBytes):
				stopped, err := applyPart(writeCtx)
				if err != nil {
					return err
				}
				if stopped {
					// An urgent writer came while the part was applied:
					// it waits for the change in hand, the fan-out of
					// what was applied and this commit, not the whole
					// part.
					if err := cutPart(writeCtx); err != nil {
						return err
					}
					if in.cutForWriters != nil {
						in.cutForWriters.Inc()
					}
					in.urgentCut()
				}
			case in.full(total, queued, batchBytes):
				if err := flush(writeCtx, false); err != nil {
					return err
				}
			}
		case <-timer.C:
			if open != nil && len(events) > 0 {
				// A backlog's batch in parts outlasts its wait by far (a
				// part applies in about a second): it is cut at
				// catchup_batch_size or where the queue runs dry.
				break
			}
			if err := flush(writeCtx, in.live(len(events))); err != nil {
				return err
			}
		case <-idle.C:
			if pending {
				// Not idle: the open batch's commit, at most its wait
				// away, ticks the sweep and rearms this timer. A
				// stretched batch's wait reaches sweep.idle_interval
				// (both 5 s by default), and an idle tick here would
				// visit a whole budget on a busy writer, every 50 ms
				// while it leaves work pending.
				break
			}
			// A stream quiet for an idle interval is not a busy one: its
			// next post waits batch_interval, not a wait stretched before
			// the lull.
			in.interval.Store(int64(in.batchInterval))
			if err := in.followReset(writeCtx); err != nil {
				return err
			}
			res, err := in.tick(writeCtx, false, 0, 0)
			if err != nil {
				return err
			}
			next := in.sweepIdle
			if res.Pending {
				next = min(next, 50*time.Millisecond)
			}
			idle.Reset(next)
		}
	}
}

// errStoppedBusy is a flush given up on at a stop because another process
// held the write lock: nothing of the batch was written. run returns it so
// the loop ends; Run reports a clean stop.
var errStoppedBusy = errors.New("stopped with the last batch uncommitted")

// queueBytes bounds the record bytes waiting in the consumer's queue,
// which is bounded in events (jetstream.queue_size, 16,384): with records
// up to 64 KiB each it could otherwise hold about 1 GiB.
const queueBytes = 64 << 20

// maxBatchBytes bounds the record bytes one batch, or one part of a
// backlog's batch, holds in memory, whatever its count: records may be up
// to 64 KiB each, and a part of 8,192 such would hold 512 MiB.
const maxBatchBytes = 32 << 20

// full says whether a batch of n changes holding bytes of records is to be
// flushed now, with queued events waiting in the consumer's queue: at
// batchSize, unless events are queued behind it (catching up) or its wait
// was stretched (a busy writer), in which case it grows to catchupSize;
// and at maxBatchBytes whatever the count.
func (in *ingester) full(n, queued, bytes int) bool {
	if bytes >= maxBatchBytes {
		return true
	}
	if n < in.batchSize {
		return false
	}
	if queued == 0 && in.currentInterval() <= in.batchInterval {
		return true
	}
	return n >= max(in.catchupSize, in.batchSize)
}

// maxBacklogBytes bounds the record bytes of a backlog's batch applied in
// parts (each part holds up to maxBatchBytes): 60,000 records of up to 64
// KiB would otherwise make one transaction, and the WAL it leaves, about
// 4 GiB. Real posts are well under a KiB, so a catch-up's batches stay at
// catchup_batch_size.
const maxBacklogBytes = 4 * maxBatchBytes

// maxBacklogHold bounds how long a backlog's batch applied in parts stays
// open: it holds the write lock, which other writers (a new viewer's
// registration, first reads) wait for, and the cursor does not move until
// it commits. At 10,000 viewers a batch of 60,000 events takes about 6 s;
// at 100,000 viewers one took over a minute (docs/benchmarks.md,
// twenty-fifth round), and is now cut here.
const maxBacklogHold = 10 * time.Second

// holdLimit is backlogHold or its default.
func (in *ingester) holdLimit() time.Duration {
	if in.backlogHold > 0 {
		return in.backlogHold
	}
	return maxBacklogHold
}

// backlogFull says whether a batch applied in parts holds bytes of records
// enough to commit.
func (in *ingester) backlogFull(bytes int) bool {
	limit := in.backlogBytes
	if limit <= 0 {
		limit = maxBacklogBytes
	}
	return bytes >= limit
}

// catchupPartSize is the daemon's partSize: a backlog's batch of 60,000
// events is applied in parts of 8,192 at most, so the read loop's queue
// never waits on a whole batch.
const catchupPartSize = 8192

// catchupPartTime is the daemon's partTime. At 10,000 viewers a part of
// 8,192 events applies in about a second; at 100,000 viewers it took
// about 11 s, and the read loop, waiting on it past its 3 s stall timeout,
// stepped away from its connection 111 times in a 1M-event catch-up and
// was sent 1.17M frames again (docs/benchmarks.md, twenty-sixth round).
// A part of about a second also bounds what an urgent writer waits
// (feeds.Store.WriterWanted) and how far past maxBacklogHold a batch runs.
const catchupPartTime = time.Second

// minPartSize bounds how small adaptPart makes a part.
const minPartSize = 256

// A first read is several urgent writes in a row (its registration, its
// claim, its listings' pages, its completion), and each one that comes
// while a part is being applied waits for that part and the commit of the
// batch it cuts. So for urgentWindow after a batch was cut for an urgent
// writer, parts take urgentPartTime, not partTime: the writes that follow
// wait a tenth as long, and a catch-up with no new viewer keeps its
// parts of a second.
const (
	urgentPartTime = 100 * time.Millisecond
	urgentWindow   = 2 * time.Second
)

// partTimeNow is how long the next part should take.
func (in *ingester) partTimeNow() time.Duration {
	if in.partTime > urgentPartTime && !in.urgentUntil.IsZero() && in.now().Before(in.urgentUntil) {
		return urgentPartTime
	}
	return in.partTime
}

// urgentCut notes a batch cut for an urgent writer: the parts of the
// next urgentWindow take urgentPartTime, starting with the next.
func (in *ingester) urgentCut() {
	if in.partTime <= urgentPartTime {
		return
	}
	in.urgentUntil = in.now().Add(urgentWindow)
	limit := in.partLimit
	if limit <= 0 {
		limit = in.partSize
	}
	in.partLimit = max(int(int64(limit)*int64(urgentPartTime)/int64(in.partTime)), min(minPartSize, in.partSize))
}

// adaptPart sizes the next part of a backlog's batch from the last one,
// of n events applied in took: partTimeNow's worth at that pace, between
// minPartSize and partSize.
func (in *ingester) adaptPart(n int, took time.Duration) {
	if in.partTime <= 0 || n <= 0 {
		return
	}
	next := in.partSize
	if took > 0 {
		next = int(min(int64(in.partSize), int64(n)*int64(in.partTimeNow())/int64(took)))
	}
	in.partLimit = max(next, min(minPartSize, in.partSize))
}

// partFull says whether the changes a backlog's batch holds are to be
// applied to its open transaction now: a part's worth (or maxBatchBytes of
// records) is taken, more are queued, and the batch is still short of
// catchupSize. Only a backlog's batch is applied in parts, as the open
// transaction holds the write lock until it commits.
func (in *ingester) partFull(b *feeds.Batch, queued, total, bytes int) bool {
	if in.partSize <= 0 || !b.Backlog || queued == 0 || total >= max(in.catchupSize, in.batchSize) {
		return false
	}
	limit := in.partSize
	if in.partLimit > 0 {
		limit = in.partLimit
	}
	return len(b.Changes) >= limit || bytes >= maxBatchBytes
}

// notBusy keeps an error met inside an open transaction from reading as
// feeds.ErrWriteBusy, which the flush would wait out and retry: the retry
// would start a new transaction without the parts the failed one held, and
// its cursor would pass over them.
func notBusy(err error) error {
	if errors.Is(err, feeds.ErrWriteBusy) {
		return fmt.Errorf("open batch failed: %v", err)
	}
	return err
}

// stretchFactor is how many times as long as the last batch took to apply
// the next one waits, at least batch_interval: the writer spends about a
// tenth of its time on a live stream before batches stretch.
const stretchFactor = 10

// waitAfter is the wait of the next batch after one that took took to
// apply (and its sweep tick): batch_interval while the writer is mostly
// idle, stretched up to max_batch_interval as it gets busy.
//
// A live batch of 100 events (100 ms at 1,000 events/s) writes some 1,600
// feed rows, nearly one per page of the feed table, and its commit resets
// every reader's page cache; in 5 s batches the same stream writes several
// rows a page, and the caches are reset once in 5 s instead of 50 times. At
// 1,000 events/s that took 26–47% off the ingest's CPU and gave getFeed a
// quarter more requests a second (docs/benchmarks.md, twenty-third round).
// On a quiet stream a batch applies in a few milliseconds and the wait
// stays at batch_interval. Only a live batch stretches it (live).
func (in *ingester) waitAfter(live bool, took time.Duration) time.Duration {
	if !live {
		return in.batchInterval
	}
	return max(in.batchInterval, min(stretchFactor*took, in.maxInterval))
}

// live says whether a batch whose wait ran out, with queued events behind
// it, is a live stream's: less than a batch_size is queued. A backlog's
// batches fill, or run out of time with the queue holding more; stretched,
// they would no longer be cut where the queue runs dry, so each would grow
// to catchup_batch_size and hold the read loop past its stall timeout (28
// step-aways in a 1M catch-up against 1, docs/benchmarks.md). A live
// stream's events come in bursts, so an empty queue would be too strict.
func (in *ingester) live(queued int) bool {
	return queued < in.batchSize
}

// currentInterval is the wait of the batch about to open.
func (in *ingester) currentInterval() time.Duration {
	if d := time.Duration(in.interval.Load()); d > 0 {
		return d
	}
	return in.batchInterval
}

// relayTimeUS is an account event's relay time in unix microseconds, 0
// when the frame had none (the zero time's would be negative).
func relayTimeUS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// addEvent moves the batch cursor to the event and adds what it says: a
// commit's record change, an account's status, an identity change.
func addEvent(b *feeds.Batch, ev *jetstream.Event) {
	if ev.TimeUS >= b.Cursor.TimeUS {
		b.Cursor = feeds.StreamCursor{TimeUS: ev.TimeUS, Seq: ev.Seq, Host: ev.Host}
	}
	if ev.Kind == jetstream.KindAccount && ev.Account != nil {
		b.Accounts = append(b.Accounts, feeds.AccountStatus{
			DID: ev.DID, Active: ev.Account.Active, Status: ev.Account.Status, TimeUS: ev.TimeUS,
			RelayTimeUS: relayTimeUS(ev.Account.Time), RelaySeq: ev.Account.Seq,
		})
		return
	}
	if ev.Kind == jetstream.KindIdentity {
		b.Identities = append(b.Identities, ev.DID)
		return
	}
	if ev.Kind != jetstream.KindCommit || ev.Commit == nil {
		return
	}
	c := ev.Commit
	b.Changes = append(b.Changes, feeds.Change{
		DID:         ev.DID,
		Collection:  c.Collection,
		RKey:        c.RKey,
		Op:          operation(c.Operation),
		Rev:         c.Rev,
		CID:         c.CID,
		Record:      c.Record,
		Subject:     c.Subject,
		CreatedAtUS: c.CreatedAtUS,
		TimeUS:      ev.TimeUS,
	})
}

func operation(op jetstream.Operation) feeds.Operation {
	switch op {
	case jetstream.OpCreate:
		return feeds.OpCreate
	case jetstream.OpUpdate:
		return feeds.OpUpdate
	default:
		return feeds.OpDelete
	}
}
