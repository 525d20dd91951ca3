package jetstream

import (
	"fmt"

	"github.com/atfeeds/appview/internal/textclip"
)

// A drop's error is logged, and a frame can be a megabyte: the strings from
// it that an error names are clipped to maxQuoted bytes, and an error from
// elsewhere (encoding/json quotes a number literal whole) to maxDetail.
const (
	maxQuoted = 64
	maxDetail = 256
)

// Drop reasons. They are a small closed set because they are used as the
// "reason" label of the dropped-events metric.
const (
	ReasonBadJSON        = "bad_json"
	ReasonBadUTF8        = "bad_utf8"
	ReasonMissingField   = "missing_field"
	ReasonBadDID         = "bad_did"
	ReasonBadKind        = "bad_kind"
	ReasonBadOperation   = "bad_operation"
	ReasonBadNSID        = "bad_nsid"
	ReasonBadRKey        = "bad_rkey"
	ReasonBadCID         = "bad_cid"
	ReasonBadRecord      = "bad_record" // record is not a JSON object
	ReasonTypeMismatch   = "type_mismatch"
	ReasonBadSubject     = "bad_subject"
	ReasonRecordTooLarge = "record_too_large"
	ReasonTooDeep        = "too_deep"
	ReasonFrameTooLarge  = "frame_too_large"
	ReasonBinaryFrame    = "binary_frame"
	ReasonBadRev         = "bad_rev"
	ReasonBadStatus      = "bad_status"
	ReasonTimeInFuture   = "time_in_future"      // time_us past the local clock plus the allowed skew
	ReasonBadCursor      = "cursor_out_of_range" // a v2 sequence number a server would read as a time
	ReasonBadCompression = "bad_compression"     // a compressed message whose deflate data is corrupt
)

// dropReasons lists every reason a frame can be dropped for, so that
// metrics can be initialised and tests can check that no other value
// escapes.
var dropReasons = []string{
	ReasonBadJSON, ReasonBadUTF8, ReasonMissingField, ReasonBadDID,
	ReasonBadKind, ReasonBadOperation, ReasonBadNSID, ReasonBadRKey,
	ReasonBadCID, ReasonBadRecord, ReasonTypeMismatch, ReasonBadSubject,
	ReasonRecordTooLarge, ReasonTooDeep, ReasonFrameTooLarge, ReasonBinaryFrame,
	ReasonTimeInFuture, ReasonBadCursor, ReasonBadRev, ReasonBadStatus,
	ReasonBadCompression,
}

// DropError says why a frame was dropped. Reason is one of the Reason…
// constants; Err carries the detail for logs.
type DropError struct {
	Reason string
	Err    error
}

func (e *DropError) Error() string {
	if e.Err == nil {
		return "drop frame: " + e.Reason
	}
	return fmt.Sprintf("drop frame: %s: %v", e.Reason, e.Err)
}

func (e *DropError) Unwrap() error { return e.Err }

func drop(reason string, err error) *DropError {
	if err == nil {
		return &DropError{Reason: reason}
	}
	if msg := err.Error(); len(msg) > maxDetail {
		err = &clippedError{msg: clip(msg, maxDetail), err: err}
	}
	return &DropError{Reason: reason, Err: err}
}

func dropf(reason, format string, args ...any) *DropError {
	return &DropError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// clippedError shortens the message of err and still unwraps to it.
type clippedError struct {
	msg string
	err error
}

func (e *clippedError) Error() string { return e.msg }

func (e *clippedError) Unwrap() error { return e.err }

// clip is textclip.Clip.
var clip = textclip.Clip
