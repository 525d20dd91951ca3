package jetstream

import (
	"bytes"
	"encoding/json"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// recordHead holds the few record fields the appview reads while decoding.
// Everything else stays in the raw record for the storage layer.
type recordHead struct {
	Type      looseString
	Subject   looseString
	CreatedAt looseString
}

// looseString keeps a JSON value only if it is a string, so that a record
// whose "subject" is an object (a repost) or whose createdAt is a number
// still decodes; validation decides what matters.
type looseString struct {
	s  string
	ok bool
}

func (l *looseString) set(value []byte) {
	if len(value) < 2 || value[0] != '"' {
		return
	}
	inner := value[1 : len(value)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		// The common case: no escapes, the bytes are the string.
		l.s, l.ok = string(inner), true
		return
	}
	var s string
	if json.Unmarshal(value, &s) == nil {
		l.s, l.ok = s, true
	}
}

// scanRecordHead reads $type, subject and createdAt from the top level of
// a record and checks its nesting depth, in one pass over the bytes. The
// record must already be valid JSON (the frame decode checked it), which
// is what makes a byte scan enough; it is about three times faster than a
// second json.Unmarshal. Keys match exactly and the last duplicate wins.
func scanRecordHead(rec []byte, maxDepth int) (recordHead, *DropError) {
	var h recordHead
	start := 0
	for start < len(rec) && isJSONSpace(rec[start]) {
		start++
	}
	if start == len(rec) || rec[start] != '{' {
		return h, dropf(ReasonBadRecord, "record is not a JSON object")
	}

	var (
		depth     int
		key       []byte // the current top-level key, quotes included
		wantKey   bool
		valueFrom = -1
	)
	endValue := func(end int) {
		if valueFrom >= 0 && key != nil {
			h.assign(key, bytes.TrimFunc(rec[valueFrom:end], isJSONSpaceRune))
		}
		valueFrom, key = -1, nil
	}
	for i := start; i < len(rec); i++ {
		switch rec[i] {
		case '"':
			from := i
			for i++; i < len(rec) && rec[i] != '"'; i++ {
				if rec[i] == '\\' {
					i++
				}
			}
			if depth == 1 && wantKey {
				key, wantKey = rec[from:i+1], false
			}
		case '{', '[':
			depth++
			if depth > maxDepth {
				return h, dropf(ReasonTooDeep, "record nesting deeper than %d", maxDepth)
			}
			if depth == 1 {
				wantKey = true
			}
		case '}', ']':
			if depth == 1 {
				endValue(i)
			}
			depth--
		case ':':
			if depth == 1 {
				valueFrom = i + 1
			}
		case ',':
			if depth == 1 {
				endValue(i)
				wantKey = true
			}
		}
	}
	return h, nil
}

func (h *recordHead) assign(quotedKey, value []byte) {
	key := quotedKey[1 : len(quotedKey)-1]
	if bytes.IndexByte(key, '\\') >= 0 {
		// An escaped key is legal JSON; decode it rather than guess.
		var k string
		if json.Unmarshal(quotedKey, &k) != nil {
			return
		}
		key = []byte(k)
	}
	switch string(key) {
	case "$type":
		h.Type = looseString{}
		h.Type.set(value)
	case "subject":
		h.Subject = looseString{}
		h.Subject.set(value)
	case "createdAt":
		h.CreatedAt = looseString{}
		h.CreatedAt.set(value)
	}
}

func isJSONSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

func isJSONSpaceRune(r rune) bool {
	return r < 0x80 && isJSONSpace(byte(r))
}

// datetimeUS parses an atproto datetime leniently (records in the wild
// carry legacy formats) and returns unix microseconds, or 0.
func datetimeUS(raw string) int64 {
	if raw == "" {
		return 0
	}
	dt, err := syntax.ParseDatetimeLenient(raw)
	if err != nil {
		return 0
	}
	t := dt.Time()
	if t.IsZero() {
		return 0
	}
	// 0 means "no date"; a record dated at or before the epoch still sinks.
	return max(t.UnixMicro(), 1)
}
