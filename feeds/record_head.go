package feeds

import (
	"encoding/json"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// RecordHead is what the store reads from a record a PDS sent (a listing
// page, a notified record) besides the record itself: a follow's subject
// and the record's createdAt.
type RecordHead struct {
	// Subject is the "subject" member when it is a string, else "".
	Subject string
	// CreatedAtUS is createdAt in unix microseconds, 0 when absent or not
	// a datetime; a record dated at or before the epoch gets 1, so it
	// still sinks.
	CreatedAtUS int64
}

// ParseRecordHead reads a record's head as the stream decoder does
// (jetstream.scanRecordHead): exact keys, the last of a repeated key, a
// member that is not a string ignored, datetimes read leniently. Paths
// that read the same record differently store different things for it:
// a "Subject" the stream ignores must not make a follow here. It reports
// false when raw is not a JSON object.
func ParseRecordHead(raw json.RawMessage) (RecordHead, bool) {
	m, ok := jsonObject(raw)
	if !ok {
		return RecordHead{}, false
	}
	h := RecordHead{Subject: jsonStringMember(m, "subject")}
	if dt, err := syntax.ParseDatetimeLenient(jsonStringMember(m, "createdAt")); err == nil && !dt.Time().IsZero() {
		h.CreatedAtUS = max(dt.Time().UnixMicro(), 1)
	}
	return h, true
}
