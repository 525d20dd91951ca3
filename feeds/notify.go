package feeds

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Records fetched on request (notifyOfUpdate) are applied through the same
// code as Jetstream commits (txWriter.apply), but getRecord returns no repo
// revision, and the rev is what makes every write idempotent. So the store
// makes one up, from what it held before the fetch:
//
//	notified rev = <base rev of the stored row or tombstone> "." <17-digit µs>
//
// where the base rev is the stored rev up to any earlier "." suffix, and the
// time is when the stored state was read (before the PDS was asked).
// Revisions are 13-character TIDs compared as strings, and "." sorts below
// every TID character, so the notified rev lies strictly between the base
// rev and every real rev above it:
//
//   - every commit the store already applied (rev <= base) is older than the
//     fetched state, and its replay stays a duplicate;
//   - every commit the store has not applied (rev > base) still applies,
//     in stream order, so Jetstream always has the last word and the feed
//     converges on the stream's newest state;
//   - a commit Jetstream applied while the record was being fetched has a
//     rev above the base, so the notified write loses against it and never
//     overrides newer Jetstream data (the outcome is NotifySuperseded);
//   - two notifications of one record apply in the order their reads
//     started (the suffix grows); a later one with the same content is a
//     no-op because the CID (for follows, the subject) is unchanged.
//
// The price: while Jetstream lags behind a notification, a commit between
// the base rev and the fetched state may briefly show the older version
// until the stream delivers the rest. Nothing is lost or resurrected for
// good.

// RecordKey names one record.
type RecordKey struct {
	DID        syntax.DID
	Collection syntax.NSID
	RKey       syntax.RecordKey
}

// StoredRecord is what the store holds for one record key, read before the
// record is fetched from its PDS.
type StoredRecord struct {
	// InScope: the store keeps this account's records of this collection
	// (always in index_all mode; otherwise a viewer follows the author of
	// a target record, or the author of a follow record is a viewer).
	InScope bool
	// Stored: a row exists. CID is set for target records, Subject for
	// follow records.
	Stored  bool
	CID     string
	Subject syntax.DID
	// Tombstoned: no row, but a delete is recorded.
	Tombstoned bool
	// Rev is the rev of the row, else of the tombstone, else empty.
	Rev string
	// ReadAt is when the state was read; it orders notifications.
	ReadAt time.Time
}

// LookupRecord reads the stored state of a record from the read pool. Call
// it before fetching the record, and hand the result back in
// Notified.Before.
func (s *Store) LookupRecord(ctx context.Context, k RecordKey, now time.Time) (StoredRecord, error) {
	st := StoredRecord{ReadAt: now}
	collID, isFollow := s.followColls[k.Collection]
	if !isFollow {
		var ok bool
		if collID, ok = s.targetColls[k.Collection]; !ok {
			return st, ErrUnknownLane
		}
	}
	var actorID int64
	err := s.reader.QueryRowContext(ctx, `SELECT id FROM actors WHERE did = ?`, string(k.DID)).Scan(&actorID)
	if errors.Is(err, sql.ErrNoRows) {
		// Never interned: nothing stored, and outside index_all mode
		// nobody follows the account (a follow interns its subject).
		st.InScope = s.indexAll
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("look up actor: %w", err)
	}
	switch {
	case s.indexAll:
		st.InScope = true
	case isFollow:
		st.InScope, err = s.exists(ctx, writeSQL.viewerOfFollows, actorID, collID)
	default:
		st.InScope, err = s.exists(ctx, writeSQL.followedByAnyone, actorID)
	}
	if err != nil {
		return st, fmt.Errorf("check scope: %w", err)
	}
	if isFollow {
		err = s.reader.QueryRowContext(ctx, `
			SELECT a.did, f.rev FROM follows f JOIN actors a ON a.id = f.subject_id
			WHERE f.actor_id = ? AND f.collection_id = ? AND f.rkey = ?`,
			actorID, collID, string(k.RKey)).Scan(&st.Subject, &st.Rev)
	} else {
		err = s.reader.QueryRowContext(ctx, `
			SELECT cid, rev FROM records WHERE actor_id = ? AND collection_id = ? AND rkey = ?`,
			actorID, collID, string(k.RKey)).Scan(&st.CID, &st.Rev)
	}
	switch {
	case err == nil:
		st.Stored = true
		return st, nil
	case !errors.Is(err, sql.ErrNoRows):
		return st, fmt.Errorf("look up record: %w", err)
	}
	err = s.reader.QueryRowContext(ctx, writeSQL.tombstoneByKey, actorID, collID, string(k.RKey)).Scan(&st.Rev)
	switch {
	case err == nil:
		st.Tombstoned = true
	case !errors.Is(err, sql.ErrNoRows):
		return st, fmt.Errorf("look up tombstone: %w", err)
	}
	return st, nil
}

func (s *Store) exists(ctx context.Context, query string, args ...any) (bool, error) {
	var one int
	err := s.reader.QueryRowContext(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Notified is a record as its author's PDS reported it on request, parsed
// at the edge like a Jetstream commit.
type Notified struct {
	RecordKey
	// Present is false when the PDS answered that the record does not
	// exist: the record is deleted.
	Present     bool
	CID         string
	Record      json.RawMessage
	Subject     syntax.DID // set for follow collections
	CreatedAtUS int64
	// Before is what LookupRecord returned before the fetch.
	Before StoredRecord
}

// NotifyOutcome is what applying a notified record did.
type NotifyOutcome uint8

const (
	// NotifyWritten: the record was created or updated.
	NotifyWritten NotifyOutcome = iota + 1
	// NotifyUnchanged: the stored record already has the fetched CID (for
	// a follow, the subject).
	NotifyUnchanged
	// NotifyDeleted: the stored record was deleted.
	NotifyDeleted
	// NotifyAbsent: neither the PDS nor the store has the record.
	NotifyAbsent
	// NotifySuperseded: the stream stored a newer version while the
	// record was fetched; it was kept.
	NotifySuperseded
	// NotifyOutOfScope: no viewer cares about the account; nothing stored.
	NotifyOutOfScope
)

// String is a short snake_case name, usable as a metric label.
func (o NotifyOutcome) String() string {
	switch o {
	case NotifyWritten:
		return "written"
	case NotifyUnchanged:
		return "unchanged"
	case NotifyDeleted:
		return "deleted"
	case NotifyAbsent:
		return "absent"
	case NotifySuperseded:
		return "superseded"
	case NotifyOutOfScope:
		return "out_of_scope"
	}
	return "unknown"
}

// NotifyResult is the outcome of one notified record.
type NotifyResult struct {
	Outcome NotifyOutcome
	// Stored says whether the store holds the record afterwards.
	Stored bool
}

// ApplyNotified applies records fetched on request in one write
// transaction, with the revision rules described at the top of this file.
// The BatchResult counts the writes as ApplyBatch would (NewFollows
// included); it moves no stream cursor.
func (s *Store) ApplyNotified(ctx context.Context, recs []Notified) ([]NotifyResult, BatchResult, error) {
	out := make([]NotifyResult, len(recs))
	var res BatchResult
	err := s.write(ctx, func(w *txWriter) error {
		for i := range recs {
			r, err := w.applyNotified(&recs[i])
			if err != nil {
				n := &recs[i]
				return fmt.Errorf("apply notified %s/%s/%s: %w", n.DID, n.Collection, n.RKey, err)
			}
			out[i] = r
		}
		res = w.res
		return nil
	})
	if err != nil {
		return nil, BatchResult{}, err
	}
	s.metrics.observeNotified(res)
	return out, res, nil
}

func (w *txWriter) applyNotified(n *Notified) (NotifyResult, error) {
	cur, err := w.currentRecord(n.RecordKey)
	if err != nil {
		return NotifyResult{}, err
	}
	_, isFollow := w.s.followColls[n.Collection]
	switch {
	case n.Present && cur.Stored && (isFollow && cur.Subject == n.Subject || !isFollow && cur.CID == n.CID):
		// Follows store no CID: the subject is all a feed uses of them.
		return NotifyResult{Outcome: NotifyUnchanged, Stored: true}, nil
	case !n.Present && !cur.Stored:
		return NotifyResult{Outcome: NotifyAbsent}, nil
	}
	c := Change{
		DID: n.DID, Collection: n.Collection, RKey: n.RKey, Op: OpDelete,
		Rev: notifiedRev(n.Before), TimeUS: n.Before.ReadAt.UnixMicro(),
	}
	if n.Present {
		c.Op, c.CID, c.Record, c.Subject, c.CreatedAtUS = OpCreate, n.CID, n.Record, n.Subject, n.CreatedAtUS
		if cur.Stored {
			c.Op = OpUpdate
		}
	}
	before := w.res
	if err := w.apply(&c); err != nil {
		return NotifyResult{}, err
	}
	switch {
	case w.res.OutOfScope > before.OutOfScope, w.res.Ignored > before.Ignored:
		return NotifyResult{Outcome: NotifyOutOfScope}, nil
	case w.res.Applied > before.Applied && n.Present:
		return NotifyResult{Outcome: NotifyWritten, Stored: true}, nil
	case w.res.Applied > before.Applied:
		return NotifyResult{Outcome: NotifyDeleted}, nil
	}
	// A duplicate: the stored state is newer than the fetch and stays.
	return NotifyResult{Outcome: NotifySuperseded, Stored: cur.Stored}, nil
}

// currentRecord reads the stored row of a record inside the transaction
// (no scope check, no tombstone).
func (w *txWriter) currentRecord(k RecordKey) (StoredRecord, error) {
	var st StoredRecord
	actorID, found, err := w.existingActorID(k.DID)
	if err != nil || !found {
		return st, err
	}
	if collID, ok := w.s.followColls[k.Collection]; ok {
		err = w.tx.QueryRowContext(w.ctx, `
			SELECT a.did, f.rev FROM follows f JOIN actors a ON a.id = f.subject_id
			WHERE f.actor_id = ? AND f.collection_id = ? AND f.rkey = ?`,
			actorID, collID, string(k.RKey)).Scan(&st.Subject, &st.Rev)
	} else if collID, ok := w.s.targetColls[k.Collection]; ok {
		err = w.tx.QueryRowContext(w.ctx, `
			SELECT cid, rev FROM records WHERE actor_id = ? AND collection_id = ? AND rkey = ?`,
			actorID, collID, string(k.RKey)).Scan(&st.CID, &st.Rev)
	} else {
		return st, ErrUnknownLane
	}
	switch {
	case err == nil:
		st.Stored = true
	case !errors.Is(err, sql.ErrNoRows):
		return st, fmt.Errorf("read stored record: %w", err)
	}
	return st, nil
}

// notifiedRev is the revision a notified write carries (see the top of
// this file): the base rev of what was stored before the fetch, a ".",
// and the read time in zero-padded microseconds, raised above an earlier
// notification's so that a clock step back cannot reorder them.
func notifiedRev(before StoredRecord) string {
	base, suffix, _ := strings.Cut(before.Rev, ".")
	us := before.ReadAt.UnixMicro()
	if prev, err := strconv.ParseInt(suffix, 10, 64); err == nil && prev >= us {
		us = prev + 1
	}
	return fmt.Sprintf("%s.%017d", base, us)
}

// observeNotified counts notified writes with the ingest's change and feed
// row counters, so that they add up whatever path a record came by.
func (m *Metrics) observeNotified(r BatchResult) {
	if m == nil {
		return
	}
	m.changes.WithLabelValues("applied").Add(float64(r.Applied))
	m.changes.WithLabelValues("duplicate").Add(float64(r.Duplicates))
	m.changes.WithLabelValues("out_of_scope").Add(float64(r.OutOfScope))
	m.feedRows.WithLabelValues("fanout").Add(float64(r.FanoutRows))
	m.feedRows.WithLabelValues("merge").Add(float64(r.MergedRows))
	m.feedRows.WithLabelValues("remove").Add(float64(r.RemovedRows))
}
