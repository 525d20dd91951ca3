package jetstream

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/internal/jsontext"
)

// DefaultMaxClockSkew is DecoderConfig.MaxClockSkew's default, and so
// the least a failover to another host rewinds (Client.hostChangeRewind).
const DefaultMaxClockSkew = 5 * time.Minute

const (
	defaultMaxRecordBytes = 64 << 10
	defaultMaxDepth       = 32
	// maxStatusBytes bounds an account's status, a short token
	// ("deactivated", "takendown", …) that is stored as it comes: without
	// a bound, one frame could make it a megabyte.
	maxStatusBytes = 64
	// minTimeCursor is where a subscribe cursor stops being a v2 sequence
	// number and becomes a time_us: a larger "cursor" field, sent back to
	// its host, would ask for a time (likely the future, so the live tip).
	minTimeCursor = 1_000_000_000_000_000
)

// DecoderConfig sets what the Decoder accepts.
type DecoderConfig struct {
	// FollowCollections are collections whose records name a followed
	// account: their top-level "subject" must be a DID, which the decoder
	// parses into Commit.Subject.
	FollowCollections []syntax.NSID
	// MaxRecordBytes caps the size of a record's JSON; default 64 KiB.
	MaxRecordBytes int
	// MaxDepth caps the JSON nesting depth of a record (the record object
	// itself is depth 1); default 32.
	MaxDepth int
	// MaxClockSkew is how far past the local clock a frame's time_us may
	// be; default 5 minutes. A later frame is dropped with no position:
	// the stored cursor never goes backwards, so one frame stamped in the
	// future would otherwise hold it there, refusing every later batch,
	// and a restart would resume at the live tip.
	MaxClockSkew time.Duration
	// Now is the local clock; default time.Now.
	Now func() time.Time
}

// Decoder turns Jetstream frames into validated Events. It is immutable
// after NewDecoder and safe for concurrent use.
type Decoder struct {
	follows        map[syntax.NSID]struct{}
	nsids          nsidCache
	maxRecordBytes int
	maxDepth       int
	maxClockSkew   time.Duration
	now            func() time.Time
}

// NewDecoder returns a Decoder; zero limits in cfg take their defaults.
func NewDecoder(cfg DecoderConfig) *Decoder {
	d := &Decoder{
		follows:        make(map[syntax.NSID]struct{}, len(cfg.FollowCollections)),
		maxRecordBytes: cfg.MaxRecordBytes,
		maxDepth:       cfg.MaxDepth,
		maxClockSkew:   cfg.MaxClockSkew,
		now:            cfg.Now,
	}
	for _, c := range cfg.FollowCollections {
		d.follows[c] = struct{}{}
	}
	if d.maxRecordBytes <= 0 {
		d.maxRecordBytes = defaultMaxRecordBytes
	}
	if d.maxDepth <= 0 {
		d.maxDepth = defaultMaxDepth
	}
	if d.maxClockSkew <= 0 {
		d.maxClockSkew = DefaultMaxClockSkew
	}
	if d.now == nil {
		d.now = time.Now
	}
	return d
}

// clockSkew is how far ahead of the local clock a frame's time_us may
// be (DecoderConfig.MaxClockSkew).
func (d *Decoder) clockSkew() time.Duration {
	if d == nil {
		return DefaultMaxClockSkew
	}
	return d.maxClockSkew
}

// wireEvent mirrors a frame. Strings are validated after decoding rather
// than through syntax's UnmarshalText, so that one bad field still leaves
// time_us readable for the skipped event.
type wireEvent struct {
	DID      string        `json:"did"`
	TimeUS   int64         `json:"time_us"`
	Cursor   int64         `json:"cursor"`
	Kind     string        `json:"kind"`
	Commit   *wireCommit   `json:"commit"`
	Identity *wireIdentity `json:"identity"`
	Account  *wireAccount  `json:"account"`
}

type wireCommit struct {
	Rev        string          `json:"rev"`
	Operation  string          `json:"operation"`
	Collection string          `json:"collection"`
	RKey       string          `json:"rkey"`
	CID        string          `json:"cid"`
	Record     json.RawMessage `json:"record"`
}

type wireIdentity struct {
	Handle string `json:"handle"`
}

type wireAccount struct {
	// Active is required: taken for false when missing, a malformed
	// frame would hide the account's posts.
	Active *bool  `json:"active"`
	Status string `json:"status"`
	// Seq and Time are read leniently (relayOrder): they only order the
	// account's events, and a frame with an odd one still says its status.
	Seq  json.RawMessage `json:"seq"`
	Time json.RawMessage `json:"time"`
}

// Decode parses and validates one frame. On a malformed frame it returns a
// *DropError and an Event of KindSkipped that carries the TimeUS and DID
// that could be read and are believable (TimeUS is 0 otherwise), for the
// drop's log line. The Client hands no such event over: a frame judged
// bad does not move the stream position (session.go).
func (d *Decoder) Decode(frame []byte) (Event, error) {
	ev, derr := d.decode(frame)
	// Checked whatever else is wrong with the frame, so the drop's reason
	// and log line tell of a position that would have harmed the cursor.
	if perr := d.checkPosition(&ev); perr != nil {
		return ev, perr
	}
	if derr != nil {
		return ev, derr
	}
	return ev, nil
}

// checkPosition drops ev's position, leaving a KindSkipped event with none,
// when its time_us is past the local clock plus the allowed skew or its
// sequence number would be read as a time. Such a frame is dropped for
// that reason first: it is the one that would harm the cursor.
func (d *Decoder) checkPosition(ev *Event) *DropError {
	var derr *DropError
	if now := d.now(); ev.TimeUS > now.Add(d.maxClockSkew).UnixMicro() {
		derr = dropf(ReasonTimeInFuture, "time_us %d is more than %v past the local clock (%d)",
			ev.TimeUS, d.maxClockSkew, now.UnixMicro())
	} else if ev.Seq >= minTimeCursor {
		derr = dropf(ReasonBadCursor, "cursor %d is not a sequence number", ev.Seq)
	}
	if derr != nil {
		*ev = Event{Kind: KindSkipped, DID: ev.DID}
	}
	return derr
}

func (d *Decoder) decode(frame []byte) (Event, *DropError) {
	var w wireEvent
	if err := json.Unmarshal(frame, &w); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			// encoding/json carries on past a type mismatch, so the
			// position fields may still have been filled in.
			return skipped(&w), drop(ReasonBadJSON, err)
		}
		// A syntax error leaves w empty; the frame's leading keys may
		// still be readable.
		return salvagePosition(frame), drop(ReasonBadJSON, err)
	}
	// encoding/json silently replaces invalid UTF-8 with U+FFFD; a record
	// that changed under us must not be stored, but its position is good.
	if !utf8.Valid(frame) {
		return skipped(&w), dropf(ReasonBadUTF8, "frame is not valid UTF-8")
	}
	if w.TimeUS <= 0 {
		return skipped(&w), dropf(ReasonMissingField, "time_us missing or not positive")
	}
	if w.DID == "" {
		return skipped(&w), dropf(ReasonMissingField, "did missing")
	}
	did, err := syntax.ParseDID(w.DID)
	if err != nil {
		return skipped(&w), drop(ReasonBadDID, err)
	}

	ev := Event{DID: did, TimeUS: w.TimeUS, Seq: max(w.Cursor, 0)}
	switch w.Kind {
	case "commit":
		if w.Commit == nil {
			return skipped(&w), dropf(ReasonMissingField, "commit missing")
		}
		c, derr := d.decodeCommit(w.Commit)
		if derr != nil {
			return skipped(&w), derr
		}
		ev.Kind, ev.Commit = KindCommit, c
	case "identity":
		if w.Identity == nil {
			return skipped(&w), dropf(ReasonMissingField, "identity missing")
		}
		ev.Kind, ev.Identity = KindIdentity, &Identity{Handle: validHandle(w.Identity.Handle)}
	case "account":
		if w.Account == nil {
			return skipped(&w), dropf(ReasonMissingField, "account missing")
		}
		if w.Account.Active == nil {
			return skipped(&w), dropf(ReasonMissingField, "account.active missing")
		}
		if len(w.Account.Status) > maxStatusBytes {
			return skipped(&w), dropf(ReasonBadStatus, "account.status is %d bytes, limit %d", len(w.Account.Status), maxStatusBytes)
		}
		ev.Kind, ev.Account = KindAccount, &Account{Active: *w.Account.Active, Status: w.Account.Status}
		ev.Account.Time, ev.Account.Seq = d.relayOrder(w.Account)
	case "":
		return skipped(&w), dropf(ReasonMissingField, "kind missing")
	default:
		return skipped(&w), dropf(ReasonBadKind, "unknown kind %q", clip(w.Kind, maxQuoted))
	}
	return ev, nil
}

// relayOrder reads an account event's relay time and sequence number.
// One it cannot read is left out rather than the frame dropped: the
// status still holds, and is ordered by time_us instead. So is a time
// not after the epoch, or past the local clock plus the skew allowance,
// which would otherwise make every later status change of the account
// look older; and a negative sequence number.
func (d *Decoder) relayOrder(w *wireAccount) (time.Time, int64) {
	var at time.Time
	var s string
	if json.Unmarshal(w.Time, &s) == nil {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err == nil && t.UnixMicro() > 0 && !t.After(d.now().Add(d.maxClockSkew)) {
			at = t
		}
	}
	seq, err := strconv.ParseInt(string(w.Seq), 10, 64)
	if err != nil || seq < 0 {
		seq = 0
	}
	return at, seq
}

// salvage is salvagePosition with the same position checks as Decode; a
// failed check replaces reason.
func (d *Decoder) salvage(prefix []byte, reason *DropError) (Event, *DropError) {
	ev := salvagePosition(prefix)
	if perr := d.checkPosition(&ev); perr != nil {
		return ev, perr
	}
	return ev, reason
}

func (d *Decoder) decodeCommit(w *wireCommit) (*Commit, *DropError) {
	c := &Commit{Rev: w.Rev}
	switch w.Operation {
	case "create":
		c.Operation = OpCreate
	case "update":
		c.Operation = OpUpdate
	case "delete":
		c.Operation = OpDelete
	case "":
		return nil, dropf(ReasonMissingField, "commit.operation missing")
	default:
		return nil, dropf(ReasonBadOperation, "unknown operation %q", clip(w.Operation, maxQuoted))
	}
	if w.Rev == "" {
		return nil, dropf(ReasonMissingField, "commit.rev missing")
	}
	// The rev is stored and compared as a string to order a record's
	// changes; a TID keeps it short and sortable.
	if _, err := parseTID(w.Rev); err != nil {
		return nil, drop(ReasonBadRev, err)
	}
	if w.Collection == "" {
		return nil, dropf(ReasonMissingField, "commit.collection missing")
	}
	var err error
	if c.Collection, err = d.nsids.parse(w.Collection); err != nil {
		return nil, drop(ReasonBadNSID, err)
	}
	if w.RKey == "" {
		return nil, dropf(ReasonMissingField, "commit.rkey missing")
	}
	if c.RKey, err = parseRecordKey(w.RKey); err != nil {
		return nil, drop(ReasonBadRKey, err)
	}
	if c.Operation == OpDelete {
		// A delete carries no record; anything the server sent along is
		// ignored rather than trusted.
		return c, nil
	}

	if w.CID == "" {
		return nil, dropf(ReasonMissingField, "commit.cid missing")
	}
	if _, err := parseCID(w.CID); err != nil {
		return nil, drop(ReasonBadCID, err)
	}
	c.CID = w.CID
	if len(w.Record) == 0 || string(w.Record) == "null" {
		return nil, dropf(ReasonMissingField, "commit.record missing")
	}
	if len(w.Record) > d.maxRecordBytes {
		return nil, dropf(ReasonRecordTooLarge, "record is %d bytes, limit %d", len(w.Record), d.maxRecordBytes)
	}
	head, derr := scanRecordHead(w.Record, d.maxDepth)
	if derr != nil {
		return nil, derr
	}
	if jsontext.LoneSurrogate(w.Record) {
		return nil, dropf(ReasonBadRecord, "record escapes a lone UTF-16 surrogate")
	}
	if head.Type.s != w.Collection {
		return nil, dropf(ReasonTypeMismatch, "record $type %q in collection %q", clip(head.Type.s, maxQuoted), clip(w.Collection, maxQuoted))
	}
	if _, ok := d.follows[c.Collection]; ok {
		if !head.Subject.ok {
			return nil, dropf(ReasonBadSubject, "follow subject missing or not a string")
		}
		if c.Subject, err = syntax.ParseDID(head.Subject.s); err != nil {
			return nil, drop(ReasonBadSubject, err)
		}
	}
	c.CreatedAtUS = datetimeUS(head.CreatedAt.s)
	// json.RawMessage decoding already copied the bytes out of the frame.
	c.Record = w.Record
	return c, nil
}

// skipped builds the KindSkipped event of a dropped frame, with the
// time_us and DID its log line shows. Its sequence number is not taken.
func skipped(w *wireEvent) Event {
	ev := Event{Kind: KindSkipped}
	if w.TimeUS > 0 {
		ev.TimeUS = w.TimeUS
	}
	if did, err := syntax.ParseDID(w.DID); err == nil {
		ev.DID = did
	}
	return ev
}

// validHandle keeps a handle only when it parses: an identity event is a
// hint to re-resolve the DID, so a junk handle is not worth dropping it for.
func validHandle(raw string) string {
	if raw == "" {
		return ""
	}
	if _, err := syntax.ParseHandle(raw); err != nil {
		return ""
	}
	return raw
}
