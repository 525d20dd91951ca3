// Package feeds stores follows and target records in SQLite, fans target
// writes out into per-viewer feed items, and reads feed pages back.
//
// Every SQL statement of the daemon lives in this package, so the consumer
// (package jetstream) and the handlers (package xrpc) never see the database.
package feeds

import (
	"encoding/json"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Operation is what a change does to a record.
type Operation uint8

const (
	OpCreate Operation = iota + 1
	OpUpdate
	OpDelete
)

// String returns the Jetstream spelling of the operation.
func (o Operation) String() string {
	switch o {
	case OpCreate:
		return "create"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	}
	return "unknown"
}

// Change is one record-level write, already parsed and validated at the
// edge: from a Jetstream commit today, from a PDS listing or notifyOfUpdate
// later. The store trusts its fields.
type Change struct {
	DID        syntax.DID
	Collection syntax.NSID
	RKey       syntax.RecordKey
	Op         Operation
	// Rev is the repo revision (a TID) of the commit; replays carry the
	// same or an older rev and change nothing. Empty for records that come
	// from a PDS listing, which carries no rev.
	Rev string
	CID string
	// Record is the record's JSON; nil for deletes.
	Record json.RawMessage
	// Subject is the followed DID, set when Collection is a follow
	// collection (read from the record's top-level "subject").
	Subject syntax.DID
	// CreatedAtUS is the record's createdAt in unix microseconds, 0 when
	// absent or unparseable.
	CreatedAtUS int64
	// TimeUS is the indexed time: the event's time_us, never the wall
	// clock, so a replayed stream builds the same database.
	TimeUS int64
}

// SortKey is the feed position of a record: min(indexed time, createdAt),
// so a backdated record sinks and a future-dated one cannot pin itself to
// the top of a feed.
func (c *Change) SortKey() int64 {
	if c.CreatedAtUS > 0 && c.CreatedAtUS < c.TimeUS {
		return c.CreatedAtUS
	}
	return c.TimeUS
}

// StreamCursor is a position in the Jetstream stream. It is stored in the
// same transaction as the batch it covers and never goes backwards.
type StreamCursor struct {
	// TimeUS is the newest applied event's time_us.
	TimeUS int64
	// Seq is the server's per-event sequence (v2 servers), 0 when absent.
	Seq int64
	// Host is the Jetstream URL the sequence belongs to; a sequence is
	// only meaningful on the host that issued it.
	Host string
}

// Batch is a run of changes applied in one transaction, together with the
// stream cursor that covers them.
type Batch struct {
	Changes []Change
	// Accounts are status changes, applied before the changes.
	Accounts []AccountStatus
	// Identities are accounts whose identity (handle, PDS) may have
	// changed: their stored handle is forgotten, to be verified again.
	Identities []syntax.DID
	// Cursor covers every change in the batch and any dropped frames that
	// came with them. A zero Cursor leaves the stored cursor unchanged.
	Cursor StreamCursor
	// Backlog says the batch is one of a backlog being caught up (the
	// ingester's queue held a batch_size or more as it was taken): the
	// WAL may grow to walBacklogFactor times its live threshold before a
	// commit checkpoints it. Other writes keep the threshold the last
	// batch set.
	Backlog bool
}

// BatchResult counts what a batch did.
type BatchResult struct {
	Applied    int // changes that changed the database
	Duplicates int // replays: same or older rev, or a tombstoned record
	Ignored    int // changes in a collection no feed uses
	OutOfScope int // changes by accounts no viewer cares about
	// NewFollows are follows of registered viewers created by this batch,
	// whose followees may need their backlog fetched (viewer mode only).
	NewFollows []FollowEdge
	// Restored are accounts this batch brought back after their deletion:
	// each is due a first read again (rebuildRestored), which what a
	// process remembers of its viewers' first reads must not hide.
	Restored []syntax.DID
	// CursorReset: an operator reset the stream cursor while this daemon
	// ran; Store.Cursor now holds the reset position and the consumer
	// must reconnect from it.
	CursorReset bool
	FanoutRows  int64 // feed rows written by target creates
	MergedRows  int64 // feed rows written by follow merges
	RemovedRows int64 // feed rows removed by deletes and unfollows
	// LockWait is how long the batch waited for the write lock before it
	// began: behind the daemon's other writes (a first read, notify) or
	// another process's transaction. It is not time spent applying, and
	// the ingester leaves it out of the apply time that stretches the
	// next batch.
	LockWait time.Duration
}

// AccountStatus is an account event: an author going inactive
// (deactivated, takendown, suspended, deleted) or coming back.
type AccountStatus struct {
	DID    syntax.DID
	Active bool
	Status string
	// TimeUS is the event's time_us, stamped by the Jetstream host that
	// delivered it.
	TimeUS int64
	// RelayTimeUS is the relay's account.time, 0 when absent. Every
	// Jetstream host relaying the event carries the same, so it orders an
	// account's events across a failover and a fast host's clock, where
	// TimeUS does not (newerStatus).
	RelayTimeUS int64
	// RelaySeq is the relay's account.seq, 0 when absent: it orders two
	// events of one relay stamped in the same millisecond.
	RelaySeq int64
}

// FollowEdge is one viewer following one account in a follow collection.
type FollowEdge struct {
	Viewer     syntax.DID
	Subject    syntax.DID
	Collection syntax.NSID
}
