package jetstream

import (
	"encoding/json"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Kind says which payload of an Event is set.
type Kind uint8

const (
	// KindSkipped marks a frame that was dropped as malformed: Decode
	// returns it with its error, with TimeUS and DID when they could be
	// read, for the drop's log line. The Client never delivers one. It is
	// the zero value so that an Event returned with an error is never
	// mistaken for a real one.
	KindSkipped Kind = iota
	// KindCommit is a record create, update or delete; Commit is set.
	KindCommit
	// KindIdentity says the DID's identity (handle, PDS) may have changed;
	// Identity is set.
	KindIdentity
	// KindAccount is an account status change; Account is set.
	KindAccount
)

// String returns the wire name of the kind ("commit", …), or "skipped".
func (k Kind) String() string {
	switch k {
	case KindCommit:
		return "commit"
	case KindIdentity:
		return "identity"
	case KindAccount:
		return "account"
	default:
		return "skipped"
	}
}

// Operation is what a commit did to its record.
type Operation uint8

const (
	OpCreate Operation = iota + 1
	OpUpdate
	OpDelete
)

// String returns the wire name of the operation: "create", "update" or
// "delete"; "none" for the zero value, which is also the metric label used
// for events that are not commits.
func (o Operation) String() string {
	switch o {
	case OpCreate:
		return "create"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	default:
		return "none"
	}
}

// Event is one decoded Jetstream frame.
type Event struct {
	DID syntax.DID
	// TimeUS is the server's unix-microsecond timestamp. It is not unique:
	// every operation of one commit shares it.
	TimeUS int64
	// Seq is the v2 server's per-instance sequence number (the frame's
	// "cursor" field), 0 when absent. It is only meaningful together with
	// Host, because each server instance numbers its own events.
	Seq int64
	// Host is the subscribe URL (as configured) that delivered the event,
	// set by the Client so the caller can store Seq with the host it
	// belongs to. Empty when the Decoder is used on its own.
	Host string
	// Session numbers the connection that delivered the event (see
	// Client.Restart).
	Session uint64
	Kind    Kind

	Commit   *Commit   // set when Kind == KindCommit
	Identity *Identity // set when Kind == KindIdentity
	Account  *Account  // set when Kind == KindAccount
}

// Commit is one record operation.
type Commit struct {
	Rev        string
	Operation  Operation
	Collection syntax.NSID
	RKey       syntax.RecordKey
	CID        string // empty for delete
	// Record is the record's atproto JSON, nil for delete. It is a copy
	// owned by the event, so the frame buffer can be reused.
	Record json.RawMessage
	// Subject is the followed DID, set only for records in one of the
	// decoder's FollowCollections.
	Subject syntax.DID
	// CreatedAtUS is the record's createdAt in unix microseconds, 0 when
	// absent or unparseable. It is written by the client, so it can be far
	// in the past or the future.
	CreatedAtUS int64
}

// Identity says a DID's identity may have changed; the appview should
// re-resolve it rather than trust the handle.
type Identity struct {
	// Handle is the handle the server saw, empty when absent or not a
	// syntactically valid handle.
	Handle string
}

// Account is an account status change.
type Account struct {
	Active bool
	// Status is why the account is inactive ("deactivated", "takendown",
	// "suspended", "deleted", …); usually empty when Active.
	Status string
	// Time is the relay's account.time, zero when absent, unreadable, or
	// past the local clock plus the skew allowance. Unlike the frame's
	// time_us, every Jetstream host relays the same, so it orders one
	// account's status changes across hosts whose clocks differ. Bounded
	// as time_us is, so that one frame cannot pin an account's status.
	Time time.Time
	// Seq is the relay's account.seq, 0 when absent or unreadable. It
	// orders only events of one relay, so it breaks ties of Time alone
	// (a relay may stamp two changes in the same millisecond).
	Seq int64
}
