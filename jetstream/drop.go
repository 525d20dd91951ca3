package jetstream

import "fmt"

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
	return &DropError{Reason: reason, Err: err}
}

func dropf(reason, format string, args ...any) *DropError {
	return &DropError{Reason: reason, Err: fmt.Errorf(format, args...)}
}
