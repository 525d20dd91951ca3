package feeds

import (
	"context"
	"fmt"
	"time"
)

// SweepOptions configures the prune sweep, retention and vacuum. A zero
// field takes its default.
type SweepOptions struct {
	// Actors is how many viewers the sweep visits per BatchEvents events
	// ingested (sweep_actors), and what an idle tick's slice visits: up to
	// half on viewers whose feeds grew, the rest after the rolling cursor.
	// 1 leaves no half for the grown queue and disables that fast path.
	Actors int
	// BatchEvents is the events Actors visits stand for: the ingest's
	// batch_size. A live batch carries fewer (what batch_interval
	// gathered), and its slice visits as many fewer viewers.
	BatchEvents int
	// RecoveryInterval is how long after a full pass ended the next one
	// becomes due even without ingest, so rows that went over cap with no
	// fresh writes (a lowered cap, an import) are trimmed on an idle stream.
	RecoveryInterval time.Duration
	// Retention is how long, in event time, a target record that no feed
	// holds is kept. Negative keeps records forever.
	Retention time.Duration
	// TombstoneWindow is how long, in event time, delete tombstones are
	// kept. It must cover any replay of the stream (the reconnect rewind).
	// Negative keeps them forever.
	TombstoneWindow time.Duration
	// GrownLimit bounds the queue of grown feeds; past it new entries are
	// dropped and the rolling cursor covers them.
	GrownLimit int
	// IncrementalVacuum creates new database files in
	// auto_vacuum=incremental mode, so the sweep can return free pages to
	// the file system. Off by default: freed pages are reused anyway, so
	// the file stops growing once feeds are at cap, and the mode costs
	// about 15% of fan-out throughput (docs/prune.md). It only shrinks the
	// file after a large one-off drop (a lowered cap, retired viewers). An
	// existing file keeps the mode it was created with.
	IncrementalVacuum bool
	// VacuumPages is, in incremental mode, both the most free pages one
	// tick returns to the file system and the free pages kept for reuse.
	// Negative disables vacuum.
	VacuumPages int
}

// Defaults of SweepOptions.
const (
	DefaultSweepActors      = 500
	DefaultBatchEvents      = 1000
	DefaultRecoveryInterval = 6 * time.Hour
	DefaultRetention        = 7 * 24 * time.Hour
	DefaultTombstoneWindow  = 72 * time.Hour
	DefaultGrownLimit       = 10_000
	DefaultVacuumPages      = 1024
)

func (o SweepOptions) withDefaults() SweepOptions {
	if o.Actors <= 0 {
		o.Actors = DefaultSweepActors
	}
	if o.BatchEvents <= 0 {
		o.BatchEvents = DefaultBatchEvents
	}
	if o.RecoveryInterval <= 0 {
		o.RecoveryInterval = DefaultRecoveryInterval
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.TombstoneWindow == 0 {
		o.TombstoneWindow = DefaultTombstoneWindow
	}
	if o.GrownLimit <= 0 {
		o.GrownLimit = DefaultGrownLimit
	}
	if o.VacuumPages == 0 {
		o.VacuumPages = DefaultVacuumPages
	}
	return o
}

// grownBudget is the part of a slice's budget the grown queue may use.
func (o SweepOptions) grownBudget() int { return o.Actors / 2 }

// Tick is one beat of the sweep: a committed ingest batch, or the idle
// timer when the stream is quiet.
type Tick struct {
	// Now is the clock time of the tick; recovery passes are scheduled
	// on it. Tests inject it. Zero means time.Now().
	Now time.Time
	// Mutated says the tick's batch wrote feed rows (see
	// BatchResult.MutatedFeeds). Idle timer ticks leave it false.
	Mutated bool
	// Events is how many events the tick's batch carried. The sweep visits
	// SweepOptions.Actors viewers per SweepOptions.BatchEvents events
	// however the stream was batched: a catch-up batch of 30 batches'
	// worth runs one slice of 30 budgets, and a live batch of a tenth of
	// one a slice of a tenth (the fraction of a visit left over is carried
	// to the next tick). 0 stands for one ordinary batch.
	Events int
	// Rows is the feed rows the tick's batch wrote (fan-out and merges).
	// Where events reach many viewers each, the pace per event falls
	// behind, so a slice visits one viewer per rowsPerVisit rows written
	// where that is more (see sliceVisits).
	Rows int64
}

// maxSliceScale bounds a slice to that many budgets of
// SweepOptions.Actors, so one transaction stays short.
const maxSliceScale = 100

// sliceVisits is how many viewers the slice of a mutated tick visits: its
// events' share of the per-event pace (Tick.Events), or its rows' share
// of the row pace, one visit per rowsPerVisit rows written, whichever is
// more; the fraction of a visit left over is carried to the next tick, so
// a tick owed less than one visit runs no slice. The row pace keeps feeds
// near their caps whatever the fan-out per event: visits keep up with
// rows however many viewers there are, and the rolling cursor, which gets
// at least half of each slice, completes a pass before the average viewer
// has received about 2 × rowsPerVisit new rows (docs/prune.md). With
// 10,000 viewers and 16 rows an event the per-event pace is the faster
// one; with 100,000 viewers and 70 rows an event feeds ran 45% over cap
// before the row pace (benchmarks.md).
//
// Before the shares, every mutated tick visited at least a whole budget:
// a live stream's batches of 100 events (batch_interval) swept ten times
// as fast per event as catch-up batches did, for nothing (benchmarks.md,
// sixteenth round).
func (sw *sweeper) sliceVisits(t Tick) int {
	events := int64(t.Events)
	if events <= 0 {
		events = int64(sw.opts.BatchEvents)
	}
	// Both shares in units of 1 / (BatchEvents × rowsPerVisit) of a visit
	// (visitUnit), so the larger can be taken and its remainder carried
	// exactly.
	unit := sw.visitUnit()
	byEvents := int64(sw.opts.Actors) * events * max(sw.rowsPerVisit, 1)
	byRows := max(t.Rows, 0) * int64(sw.opts.BatchEvents)
	sw.owedVisits += max(byEvents, byRows)
	visits := sw.owedVisits / unit
	sw.owedVisits -= visits * unit
	return int(min(visits, int64(sw.opts.Actors)*maxSliceScale))
}

// visitUnit is one visit in owedVisits' unit.
func (sw *sweeper) visitUnit() int64 {
	return int64(sw.opts.BatchEvents) * max(sw.rowsPerVisit, 1)
}

// refundVisits gives back to the next tick the visits of a slice that
// failed (the write lock held by another process past the busy timeout,
// a stop): its transaction rolled back, so they were never made, and a
// live stream's next tick, owed a fraction of a visit, would otherwise
// run none and leave those feeds over cap until the next lap.
func (sw *sweeper) refundVisits(visits int) {
	sw.owedVisits += int64(visits) * sw.visitUnit()
}

// grownShare is how many of a slice's visits the grown queue may walk:
// half, and the odd visit of a slice to each queue in turn, so slices of
// one visit (a slow stream) still serve grown feeds every other tick.
// takesOdd is grownTakesOdd once the slice has made its visits: the caller
// stores it after the slice commits, as a slice that rolled back took no
// turn (TestSweepAFailedSliceKeepsTheOddVisitsTurn).
func (sw *sweeper) grownShare(visits int) (share int, takesOdd bool) {
	takesOdd = sw.grownTakesOdd
	if sw.opts.grownBudget() == 0 {
		return 0, takesOdd
	}
	share = visits / 2
	if visits%2 == 1 {
		if takesOdd {
			share++
		}
		takesOdd = !takesOdd
	}
	return share, takesOdd
}

// rowsPerVisitOf is the row pace of the sweep: a quarter of the smallest
// enabled cap, so a feed runs a quarter to a half over its cap between
// visits on average.
func rowsPerVisitOf(lanes []lane) int64 {
	smallest := 0
	for _, l := range lanes {
		if smallest == 0 || l.cap < smallest {
			smallest = l.cap
		}
	}
	return int64(max(smallest/4, 1))
}

// MutatedFeeds reports whether the batch wrote feed rows (a fan-out or a
// follow merge), so its tick owes the sweep visits.
func (r BatchResult) MutatedFeeds() bool { return r.FanoutRows > 0 || r.MergedRows > 0 }

// SweepReason says why a slice ran; it labels the slices metric.
type SweepReason string

const (
	// SweepIngest: the tick's batch wrote feed rows.
	SweepIngest SweepReason = "ingest"
	// SweepGrown: an idle tick with grown feeds still queued.
	SweepGrown SweepReason = "grown"
	// SweepRecovery: an idle tick while a full pass is due.
	SweepRecovery SweepReason = "recovery"
)

// SweepResult says what one tick did.
type SweepResult struct {
	// Reason is why a slice ran; empty when none did.
	Reason SweepReason
	// Viewers is how many viewers the slice visited, never more than its
	// share of the pace (sliceVisits) or, on an idle tick,
	// SweepOptions.Actors; GrownViewers of them came from the grown queue.
	Viewers      int
	GrownViewers int
	// RowsDeleted is the feed rows the slice trimmed.
	RowsDeleted int64
	// PassEnded: the rolling cursor wrapped and a full pass was recorded.
	PassEnded bool
	// Pending: the next tick has work even if idle (grown feeds are
	// queued, a full pass is due, or retention or vacuum stopped at their
	// bound), so an idle timer may tick again soon.
	Pending           bool
	RecordsRetired    int64
	RecordsExamined   int64 // retention candidates the slice examined
	TombstonesRetired int64
	VacuumedPages     int64
	// FieldRecords is how many stored records a field backlog slice
	// extracted values from (fields_store.go).
	FieldRecords int64
	// LockWait is how long the tick waited for the write lock: behind the
	// daemon's other writes (a first read, notify) or another process's
	// transaction. Like BatchResult.LockWait, the ingester leaves it out
	// of the apply time that stretches the next batch.
	LockWait time.Duration
}

// sweeper is the Store's sweep state, guarded by Store.writeMu.
type sweeper struct {
	opts         SweepOptions
	stmts        *sweepStatements
	state        *sweepState // nil until the first tick loads it
	grownPending bool
	// othersCommitted is set when the writer noticed another process's
	// commit (other_writers.go): an operator's backfill may have queued
	// grown feeds, which grownPending, set from this process's commits,
	// does not know of.
	othersCommitted bool
	disabledLanes   []int64 // lanes that left the config: their rows are swept away
	rowsPerVisit    int64   // row pace of the slices (sliceVisits)
	owedVisits      int64   // the fraction of a visit owed to earlier ticks (sliceVisits' unit)
	grownTakesOdd   bool    // the next slice of an odd number of visits gives the odd one to the grown queue
	incremental     bool    // the file is in auto_vacuum=incremental mode
	vacuumMore      bool
	retainNextUS    int64 // stream time at which the next retention lap may start
	retainMore      bool  // the last retention slice of records stopped short of the lap's end
	tombstonesMore  bool  // the last tombstone slice was full
	probeBudget     int64 // feed-row probes one retention slice may make (retentionProbeBudget)
}

// SweepTick runs one tick of the sweep: at most one slice of up to
// SweepOptions.Actors viewers, one bounded retention slice and a bounded
// incremental vacuum. A tick with nothing to do runs no statement that
// writes.
//
// Call it after each committed batch (Mutated = res.MutatedFeeds()) and on
// an idle timer. It takes the write lock, like ApplyBatch.
func (s *Store) SweepTick(ctx context.Context, t Tick) (SweepResult, error) {
	if t.Now.IsZero() {
		t.Now = time.Now()
	}
	locking := time.Now()
	s.makeWay()
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	var res SweepResult
	res.LockWait = time.Since(locking)
	if err := s.sweepInit(ctx); err != nil {
		return res, err
	}
	// An idle stream begins no transaction, so another process's commit
	// is noticed here (other_writers.go); a mutated tick's batch began one
	// just now.
	if !t.Mutated {
		if err := s.noticeOtherWriters(ctx, s.writer); err != nil {
			return SweepResult{}, err
		}
	}
	sw := &s.sweep
	if sw.othersCommitted && !sw.grownPending {
		var pending int
		if err := sw.stmts.grownExists.QueryRowContext(ctx).Scan(&pending); err != nil {
			return SweepResult{}, fmt.Errorf("read grown queue: %w", err)
		}
		sw.grownPending = pending == 1
	}
	sw.othersCommitted = false
	now := t.Now.UnixMicro()
	// A mutated tick's slice visits its batch's share; one owed less than
	// a visit runs none (the grown queue and a due pass wait for a tick
	// that runs one, or for the idle timer). An idle tick's slice, for the
	// grown queue or a due pass, visits a whole budget.
	reason, visits := s.idleReason(now), sw.opts.Actors
	if t.Mutated {
		reason, visits = "", sw.sliceVisits(t)
		if visits > 0 {
			reason = SweepIngest
		}
	}
	if reason != "" {
		if err := s.runSlice(ctx, reason, now, visits, &res); err != nil {
			if t.Mutated {
				sw.refundVisits(visits)
			}
			return res, fmt.Errorf("sweep slice: %w", err)
		}
	}
	if err := s.retain(ctx, &res); err != nil {
		return res, fmt.Errorf("retention: %w", err)
	}
	if err := s.extractBacklog(ctx, &res); err != nil {
		return res, err
	}
	freed := res.RowsDeleted > 0 || res.RecordsRetired > 0 || res.TombstonesRetired > 0
	if err := s.vacuum(ctx, freed, &res); err != nil {
		return res, fmt.Errorf("incremental vacuum: %w", err)
	}
	res.Pending = s.idleReason(now) != "" || sw.retainMore || sw.tombstonesMore || sw.vacuumMore || len(s.fieldBacklog) > 0
	return res, nil
}

// idleReason says whether a tick with no feed rows written runs a slice,
// and why.
func (s *Store) idleReason(now int64) SweepReason {
	sw := &s.sweep
	switch {
	case sw.grownPending && sw.opts.grownBudget() > 0:
		return SweepGrown
	case sw.passDue(now):
		return SweepRecovery
	}
	return ""
}

// passDue: a full pass is due one recovery interval after the previous one
// ended, and at once on a database never swept.
func (sw *sweeper) passDue(now int64) bool { return now >= sw.dueAt() }

// dueAt is when the next full pass falls due (unix microseconds).
func (sw *sweeper) dueAt() int64 {
	if sw.state.lastPassEndUS == 0 {
		return 0
	}
	return sw.state.lastPassEndUS + sw.opts.RecoveryInterval.Microseconds()
}

// sweepInit prepares the sweep's statements and loads its state at the
// first tick.
func (s *Store) sweepInit(ctx context.Context) error {
	sw := &s.sweep
	if sw.state != nil {
		return nil
	}
	if _, err := s.sweepStatements(ctx); err != nil {
		return err
	}
	st, err := loadSweepState(ctx, s.writer)
	if err != nil {
		return err
	}
	var pending int
	if err := s.writer.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sweep_grown)`).Scan(&pending); err != nil {
		return fmt.Errorf("read grown queue: %w", err)
	}
	rows, err := s.writer.QueryContext(ctx, `SELECT id FROM feed_targets WHERE enabled = 0 ORDER BY id`)
	if err != nil {
		return fmt.Errorf("read disabled lanes: %w", err)
	}
	defer rows.Close()
	var disabled []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		disabled = append(disabled, id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read disabled lanes: %w", err)
	}
	var mode int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return fmt.Errorf("read auto_vacuum: %w", err)
	}
	// 2 is incremental. A file created before the mode was set keeps
	// "none" until a full VACUUM rewrites it.
	sw.incremental = mode == 2
	if !sw.incremental && sw.opts.IncrementalVacuum && sw.opts.VacuumPages > 0 {
		s.log.Info("database is not in auto_vacuum=incremental mode; freed pages are reused but not returned (run VACUUM offline once to convert)")
	}
	sw.state = &st
	sw.rowsPerVisit = rowsPerVisitOf(s.lanes)
	sw.grownPending = pending == 1
	sw.disabledLanes = disabled
	s.metrics.observePass(st)
	return nil
}
