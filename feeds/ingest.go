package feeds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/failpoint"
)

// ApplyBatch applies a batch of changes and stores its cursor in one
// immediate transaction. Either all of it is durable or none of it is, so
// the stored cursor never covers a change that was lost.
//
// Pass a context that outlives shutdown (context.WithoutCancel) for the
// final flush: a cancelled context aborts the transaction.
func (s *Store) ApplyBatch(ctx context.Context, b *Batch) (BatchResult, error) {
	o, err := s.BeginBatch(ctx, b.Backlog)
	if err != nil {
		return BatchResult{}, err
	}
	if err := o.Add(b); err != nil {
		o.Rollback()
		return BatchResult{}, err
	}
	return o.Commit(b.Cursor)
}

// OpenBatch is one write transaction filled part by part. A catch-up
// applies its events as it takes them off the consumer's queue and commits
// them, with their cursor, once at the end: its commits stay large (a
// feed page rewritten by several parts is written to the WAL once) while
// it holds no more than a part's decoded events in memory, and the
// consumer's queue drains while the transaction grows. ApplyBatch is a
// batch of one part.
//
// It holds the store's write lock from BeginBatch to Commit or Rollback,
// so other writers in the process (first reads, the sweep) wait for all
// of it: fill one only while events are queued, and commit it early when
// an urgent writer waits (WriterWanted, writer_wanted.go).
type OpenBatch struct {
	s     *Store
	w     *txWriter
	start time.Time
	// closed: committed or rolled back, the write lock released.
	closed bool
}

// BeginBatch opens an immediate write transaction. backlog is
// Batch.Backlog: the WAL may grow past its live threshold before the
// commit checkpoints. A write lock another process holds fails it with
// ErrWriteBusy before anything is written.
func (s *Store) BeginBatch(ctx context.Context, backlog bool) (*OpenBatch, error) {
	start := time.Now()
	s.makeWay()
	s.writeMu.Lock()
	if err := s.setWALMode(ctx, backlog); err != nil {
		s.writeMu.Unlock()
		return nil, err
	}
	w, err := s.begin(ctx)
	if err != nil {
		s.writeMu.Unlock()
		return nil, err
	}
	w.res.LockWait = time.Since(start)
	return &OpenBatch{s: s, w: w, start: start}, nil
}

// Add applies a part of the batch: its identity events, then its changes
// and account events in stream order, then the fan-out of the target
// records it stored. b.Cursor and b.Backlog are not read: Commit stores
// the cursor, BeginBatch took the mode. After an error the transaction is
// to be rolled back.
func (o *OpenBatch) Add(b *Batch) error {
	_, err := o.AddUntil(b, nil)
	return err
}

// AddUntil is Add, asking stop before every change but the first whether
// to stop there (a nil stop never does; WriterWanted is an atomic load,
// nothing beside a change's writes). Stopped, it fans out what it
// applied and leaves in b what it did not: the changes not reached and the
// account events not yet due, in stream order, ready to be the start of
// the next batch; b's identity events are applied either way, and b's
// Cursor is not touched (it covers events this transaction did not
// apply: the caller commits with an earlier one). It says whether it
// stopped.
//
// A catch-up's part takes about a second; an urgent writer arriving at its
// start (a first read's page) waited for all of it before the batch could
// commit (WriterWanted). Stopping within the part, it waits for the
// change being applied, the part's fan-out so far and the commit.
func (o *OpenBatch) AddUntil(b *Batch, stop func() bool) (stopped bool, err error) {
	w := o.w
	if err := w.forgetHandles(b.Identities); err != nil {
		return false, err
	}
	// Changes and account events are applied in stream order, as one
	// event a batch would apply them (accountSchedule). Applied before the
	// changes, as they once were, a deletion found nothing yet of the
	// creates that came before it in its own batch, which then outlived it
	// with no tombstone. The fan-out at the part's end skips authors
	// inactive by then.
	sched := newAccountSchedule(b)
	for i := range b.Changes {
		if stop != nil && i > 0 && stop() {
			// The account events still scheduled come after change i-1
			// in stream order, or wait for one of their account's
			// changes still to come: as the next batch's, they keep both
			// (its schedule is built from its own changes).
			b.Identities = b.Identities[:0]
			b.Accounts = sched.leave(b.Accounts)
			n := copy(b.Changes, b.Changes[i:])
			clear(b.Changes[n:])
			b.Changes = b.Changes[:n]
			return true, w.applyFanout()
		}
		c := &b.Changes[i]
		if err := w.applyAccounts(sched.before(i, c.TimeUS)); err != nil {
			return false, err
		}
		if err := w.apply(c); err != nil {
			return false, fmt.Errorf("apply %s %s/%s/%s: %w", c.Op, c.DID, c.Collection, c.RKey, err)
		}
	}
	if err := w.applyAccounts(sched.rest()); err != nil {
		return false, err
	}
	// Fanned out here, not held to the commit: a part's feed rows are
	// what one batch of its size would write, and the next part starts
	// with nothing pending.
	return false, w.applyFanout()
}

// Commit stores the cursor (if any) and commits; either way the write lock
// is released. A failed commit wrote nothing.
func (o *OpenBatch) Commit(cursor StreamCursor) (BatchResult, error) {
	defer o.Rollback()
	s, w := o.s, o.w
	failpoint.Hit(failpoint.IngestBeforeCursor)
	if cursor.TimeUS > 0 {
		reset, err := w.saveCursor(cursor)
		if err != nil {
			return BatchResult{}, err
		}
		w.res.CursorReset = reset
	}
	failpoint.Hit(failpoint.IngestBeforeCommit)
	if err := w.commit(); err != nil {
		return BatchResult{}, fmt.Errorf("commit batch: %w", err)
	}
	s.metrics.observeBatch(w.res, time.Since(o.start))
	switch {
	case w.adopted != nil:
		s.adoptCursor(*w.adopted, w.adoptedGen)
		s.metrics.casMismatch(cursorKindJetstream)
		s.log.Warn("cursor_reset_adopted", "time_us", w.adopted.TimeUS, "generation", w.adoptedGen)
	case cursor.TimeUS > 0:
		s.advanceCursor(cursor)
	}
	s.metrics.observeCursor(s.Cursor().TimeUS)
	return w.res, nil
}

// Rollback abandons what the transaction has not committed and releases
// the write lock; after Commit it does nothing.
func (o *OpenBatch) Rollback() {
	if o.closed {
		return
	}
	o.closed = true
	o.w.tx.Rollback()
	o.s.writeMu.Unlock()
}

// applyAccounts applies account events in order.
func (w *txWriter) applyAccounts(events []*AccountStatus) error {
	for _, a := range events {
		if err := w.applyAccount(a); err != nil {
			return fmt.Errorf("apply account status of %s: %w", a.DID, err)
		}
	}
	return nil
}

// begin opens a write transaction with the hot statements ready. The
// caller holds writeMu.
func (s *Store) begin(ctx context.Context) (*txWriter, error) {
	if s.stmts == nil {
		st, err := prepareStatements(ctx, s.writer, s.audienceImplied)
		if err != nil {
			return nil, err
		}
		s.stmts = st
	}
	// Prepared before the transaction holds the one writer connection.
	if _, err := s.sweepStatements(ctx); err != nil {
		return nil, err
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		if isBusy(err) {
			s.metrics.wroteBusy()
			return nil, fmt.Errorf("begin write: %w: %v", ErrWriteBusy, err)
		}
		return nil, fmt.Errorf("begin write: %w", err)
	}
	if err := s.noticeOtherWriters(ctx, tx); err != nil {
		tx.Rollback()
		return nil, err
	}
	return &txWriter{s: s, ctx: ctx, tx: tx, bound: map[*sql.Stmt]*sql.Stmt{}}, nil
}

// beginCounting is begin, adding its wait for the write lock (another
// process's transaction) to *wait (SweepResult.LockWait).
func (s *Store) beginCounting(ctx context.Context, wait *time.Duration) (*txWriter, error) {
	began := time.Now()
	w, err := s.begin(ctx)
	*wait += time.Since(began)
	return w, err
}

// commit commits and publishes what the transaction interned.
func (w *txWriter) commit() error {
	if err := w.applyFanout(); err != nil {
		return err
	}
	// Feeds the transaction grew are queued for the sweep in the same
	// transaction (sweep_grown.go).
	if err := w.queueGrown(); err != nil {
		return err
	}
	if err := w.saveRecordIDHigh(); err != nil {
		return err
	}
	var viewersBefore, viewersAfter int64
	if len(w.viewerChanges) > 0 {
		var err error
		if viewersBefore, viewersAfter, err = w.bumpViewerVersion(); err != nil {
			return err
		}
	}
	// The record cache is told before the commit that records are about
	// to change, so no page reads a hit from it until it has forgotten
	// them (record_cache.go); it forgets them even if the commit fails.
	changes := w.s.recordCache.changing(w.changedRecords)
	err := w.tx.Commit()
	if err == nil && w.s.afterCommit != nil {
		w.s.afterCommit()
	}
	changes.done()
	if err != nil {
		return err
	}
	w.s.recordCache.created(w.created, w.changedRecords)
	w.s.identities.changed(w.identities)
	if w.gapID > 0 {
		w.s.gapCommitted(w.gapID)
	}
	w.s.rememberActors(w.newActors)
	w.s.publishFollowed(w.newFollowed)
	w.s.publishViewers(w.viewerChanges, viewersBefore, viewersAfter)
	w.s.boundWAL(w.ctx)
	return nil
}

// txWriter applies changes inside one write transaction.
type txWriter struct {
	s         *Store
	ctx       context.Context
	tx        *sql.Tx
	bound     map[*sql.Stmt]*sql.Stmt
	newActors map[syntax.DID]int64
	// newFollowed: authors found followed, published at commit.
	newFollowed followedAuthors
	res         BatchResult
	// adopted is the stored cursor when an operator's reset changed its
	// generation under us.
	adopted    *StreamCursor
	adoptedGen int64
	grown      grownBatch // feeds this transaction grew, queued for the sweep
	// pendingFanout counts target records queued for the fan-out at commit.
	pendingFanout int
	// pendingAuthors are the (author, target collection) pairs queued,
	// outside index_all mode (growFanoutAuthors).
	pendingAuthors map[[2]int64]struct{}
	// viewerChanges reach the in-memory viewer set once committed.
	viewerChanges []viewerChange
	// changedRecords were updated or deleted; the record cache forgets
	// them before the commit.
	changedRecords []int64
	// created are the target records created, for the record cache once
	// committed (cacheCreated); cacheCreates says whether to keep them:
	// 0 until the first create asks the cache, then 1 or -1.
	created      []*cachedRecord
	createdBytes int64
	cacheCreates int8
	// identities had an identity event; the identity log hears of them
	// once committed.
	identities []syntax.DID
	// gapID is a gap newer than the store knew of, recorded or found by
	// this transaction: at commit the store tells of it (gapCommitted).
	gapID int64
	// recordIDHigh is the highest record id handed out (newRecordID), 0
	// until the transaction's first record; recordIDHighRead is what was
	// stored when it was read.
	recordIDHigh, recordIDHighRead int64
	// restored counts the tombstones a listing cleared (listedTombstone),
	// listedEdits the stored records it found edited (takeListedEdit).
	restored, listedEdits int
}

// recordChanged notes a record updated or deleted in this transaction, for
// the record cache.
func (w *txWriter) recordChanged(id int64) {
	if w.s.recordCache != nil {
		w.changedRecords = append(w.changedRecords, id)
	}
}

// stmt binds a prepared statement to the batch transaction once.
func (w *txWriter) stmt(st *sql.Stmt) *sql.Stmt {
	if b, ok := w.bound[st]; ok {
		return b
	}
	b := w.tx.StmtContext(w.ctx, st)
	w.bound[st] = b
	return b
}

func (w *txWriter) exec(st *sql.Stmt, args ...any) (int64, error) {
	r, err := w.stmt(st).ExecContext(w.ctx, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// insertRecord runs one of the record inserts (the row's columns in
// order) with a new id, and reports whether it inserted a row:
// insertNewRecord changes none on a stored or tombstoned key, and leaves
// the id unused.
func (w *txWriter) insertRecord(st *sql.Stmt, actorID, collID int64, rkey, cid, rev string, sortUS, indexedUS, createdUS int64, body string) (id int64, inserted bool, err error) {
	if id, err = w.newRecordID(); err != nil {
		return 0, false, err
	}
	r, err := w.stmt(st).ExecContext(w.ctx, actorID, collID, rkey, cid, rev, sortUS, indexedUS, createdUS, body, id)
	if err != nil {
		return 0, false, err
	}
	n, err := r.RowsAffected()
	if err != nil || n == 0 {
		return 0, false, err
	}
	return id, true, nil
}

// newRecordID hands out the next record id. A transaction reads the
// highest id ever handed out once, at its first record, and stores the
// new high before it commits (saveRecordIDHigh). A rolled-back one rolls
// its high back too, so its ids are handed out again; that is safe, as no
// reader ever saw them: what is never reused is an id once committed.
func (w *txWriter) newRecordID() (int64, error) {
	if w.recordIDHigh == 0 {
		// max(id) as well: rows an older build inserted with SQLite's ids.
		err := w.tx.QueryRowContext(w.ctx, `SELECT max(high, (SELECT coalesce(max(id), 0) FROM records)) FROM record_id_high`).Scan(&w.recordIDHigh)
		if err != nil {
			return 0, fmt.Errorf("read record id high: %w", err)
		}
		w.recordIDHighRead = w.recordIDHigh
	}
	w.recordIDHigh++
	return w.recordIDHigh, nil
}

// saveRecordIDHigh stores the highest record id the transaction handed out.
func (w *txWriter) saveRecordIDHigh() error {
	if w.recordIDHigh == w.recordIDHighRead {
		return nil
	}
	if _, err := w.tx.ExecContext(w.ctx, `UPDATE record_id_high SET high = ?`, w.recordIDHigh); err != nil {
		return fmt.Errorf("store record id high: %w", err)
	}
	return nil
}

// queryRow scans one row; found is false when there is none.
func (w *txWriter) queryRow(st *sql.Stmt, args []any, dest ...any) (found bool, err error) {
	err = w.stmt(st).QueryRowContext(w.ctx, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// queryIDs runs a query of one integer column and collects it.
func (w *txWriter) queryIDs(st *sql.Stmt, args ...any) ([]int64, error) {
	return scanIDs(w.stmt(st).QueryContext(w.ctx, args...))
}

func scanIDs(rows *sql.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func (w *txWriter) apply(c *Change) error {
	if collID, ok := w.s.followColls[c.Collection]; ok {
		return w.applyFollow(c, collID)
	}
	if collID, ok := w.s.targetColls[c.Collection]; ok {
		return w.applyTarget(c, collID)
	}
	if c.Collection == ProfileCollection && w.s.profiles {
		return w.applyProfile(c)
	}
	// Not a collection any feed uses (the stream filter should not send
	// these); nothing to store.
	w.res.Ignored++
	return nil
}

// actorID interns a DID. Ids inserted by this transaction are kept aside
// until it commits.
func (w *txWriter) actorID(did syntax.DID) (int64, error) {
	if id, ok := w.s.actorIDs.get(did); ok {
		return id, nil
	}
	if id, ok := w.newActors[did]; ok {
		return id, nil
	}
	var id int64
	found, err := w.queryRow(w.s.stmts.actorByDID, []any{string(did)}, &id)
	if err != nil {
		return 0, fmt.Errorf("look up actor: %w", err)
	}
	if found {
		w.s.actorIDs.put(did, id)
		return id, nil
	}
	if _, err := w.queryRow(w.s.stmts.insertActor, []any{string(did)}, &id); err != nil {
		return 0, fmt.Errorf("insert actor: %w", err)
	}
	if w.newActors == nil {
		w.newActors = map[syntax.DID]int64{}
	}
	w.newActors[did] = id
	return id, nil
}

// existingActorID finds an interned DID without interning it: the cheap
// scope check that keeps out-of-scope accounts out of the actors table.
func (w *txWriter) existingActorID(did syntax.DID) (int64, bool, error) {
	if id, ok := w.s.actorIDs.get(did); ok {
		return id, true, nil
	}
	if id, ok := w.newActors[did]; ok {
		return id, true, nil
	}
	var id int64
	found, err := w.queryRow(w.s.stmts.actorByDID, []any{string(did)}, &id)
	if err != nil {
		return 0, false, fmt.Errorf("look up actor: %w", err)
	}
	if found {
		w.s.actorIDs.put(did, id)
	}
	return id, found, nil
}

// tombstoned reports whether a delete at least as new as rev is recorded
// for the key: then a create or update with rev is a replay.
func (w *txWriter) tombstoned(actorID, collID int64, rkey syntax.RecordKey, rev string) (exists, covers bool, err error) {
	var tsRev string
	found, err := w.queryRow(w.s.stmts.tombstoneByKey, []any{actorID, collID, string(rkey)}, &tsRev)
	if err != nil {
		return false, false, fmt.Errorf("look up tombstone: %w", err)
	}
	return found, found && tsRev >= rev, nil
}

// buryDelete applies the revision rules a delete of a record or a follow
// shares. A delete older than the stored row, or one an existing tombstone
// already covers (a replay), is a duplicate: counted, nothing written.
// Otherwise its tombstone is written, so a replayed create older than the
// delete cannot bring the row back, and the caller removes the stored row
// if there is one (found).
func (w *txWriter) buryDelete(actorID, collID int64, c *Change, found bool, storedRev string) (applies bool, err error) {
	if found && storedRev > c.Rev {
		w.res.Duplicates++
		return false, nil
	}
	if !found {
		_, covers, err := w.tombstoned(actorID, collID, c.RKey, c.Rev)
		if err != nil {
			return false, err
		}
		if covers {
			w.res.Duplicates++
			return false, nil
		}
	}
	return true, w.bury(actorID, collID, c)
}

func (w *txWriter) bury(actorID, collID int64, c *Change) error {
	_, err := w.exec(w.s.stmts.upsertTombstone, actorID, collID, string(c.RKey), c.Rev, c.TimeUS)
	if err != nil {
		return fmt.Errorf("write tombstone: %w", err)
	}
	return nil
}

func (s *Store) rememberActors(ids map[syntax.DID]int64) {
	for did, id := range ids {
		s.actorIDs.put(did, id)
	}
}
