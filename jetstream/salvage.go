package jetstream

import (
	"bytes"
	"encoding/json"
)

// salvagePosition reads did, time_us and cursor from the top level of a
// frame that cannot be decoded whole: a truncated prefix of an oversized
// frame, or one with a syntax error after its leading keys. Jetstream
// writes these keys first, so the position of a frame we must drop is
// usually still readable, and delivering it lets the caller's cursor move
// past the frame instead of replaying it on every reconnect.
//
// It walks tokens and tracks depth, so keys of the same name nested inside
// a record are never mistaken for the frame's own.
func salvagePosition(prefix []byte) Event {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return Event{Kind: KindSkipped}
	}
	var w wireEvent
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, ok := tok.(string)
		if !ok {
			break // the closing '}'
		}
		tok, err = dec.Token()
		if err != nil {
			break
		}
		switch v := tok.(type) {
		case json.Number:
			if dec.InputOffset() >= int64(len(prefix)) {
				// A number that runs to the end of the prefix may
				// have been cut short.
				return skipped(&w)
			}
			n, nerr := v.Int64()
			if nerr != nil {
				continue
			}
			switch key {
			case "time_us":
				w.TimeUS = n
			case "cursor":
				w.Cursor = n
			}
		case string:
			if key == "did" {
				w.DID = v
			}
		case json.Delim:
			if !skipNested(dec) {
				return skipped(&w)
			}
		}
	}
	return skipped(&w)
}

// skipNested consumes tokens up to the end of the object or array whose
// opening delimiter was just read; false when the input ends first.
func skipNested(dec *json.Decoder) bool {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return true
}
