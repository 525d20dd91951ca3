package pds

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/internal/jsontext"
)

// maxCursorBytes bounds a listRecords cursor; real ones are record keys.
const maxCursorBytes = 2048

// MaxRecordBytes caps a record's JSON value, as sent. It mirrors the
// Jetstream decoder's default cap (jetstream.DecoderConfig.MaxRecordBytes,
// pinned by TestMaxRecordBytesMatchesJetstream), so that a record too large
// to arrive on the stream cannot be stored through a listing either. Without
// it only the response body cap (MiBs) bounds a record, and a hostile PDS
// could make every getFeed page carry megabytes of its records.
const MaxRecordBytes = 64 << 10

// MaxRecordDepth caps a record's JSON nesting depth (the record object
// itself is depth 1). It mirrors the Jetstream decoder's default
// (jetstream.DecoderConfig.MaxDepth, pinned by
// TestMaxRecordDepthMatchesJetstream): a record the stream would drop as
// too deep must not be storable through a listing or getRecord either.
const MaxRecordDepth = 32

// ErrCursorTooLong is a page whose cursor is over 2,048 bytes: the caller
// ends its listing round with it instead of sending it back.
var ErrCursorTooLong = errors.New("cursor_too_long")

// Record is one record read from a repo. Value is the record JSON as sent:
// valid UTF-8, at most MaxRecordBytes, an object whose $type is the
// collection.
type Record struct {
	URI   syntax.ATURI
	RKey  syntax.RecordKey
	CID   string
	Value json.RawMessage
}

// Page is one listRecords page. Cursor is empty when the PDS sent none: the
// listing is over. Skipped counts the records dropped as invalid,
// OverLimit those beyond the limit asked for, not read: a PDS answering
// more than asked is misbehaving, not listing malformed records.
type Page struct {
	Records   []Record
	Cursor    string
	Skipped   int
	OverLimit int
}

// Dropped is every record the page listed but does not hold.
func (p Page) Dropped() int { return p.Skipped + p.OverLimit }

type rawRecord struct {
	URI   string          `json:"uri"`
	CID   *string         `json:"cid"`
	Value json.RawMessage `json:"value"`
}

// decodePage decodes a listRecords answer for (repo, collection) asked with
// limit. A page that is not the expected JSON fails whole; an invalid
// record in it is dropped and counted.
//
// Only the first limit records are taken: a PDS that sends more than asked
// for must not make one page store (and fan out) thousands of records. The
// rest are counted in OverLimit, not read; the page's cursor already points
// past them, so this listing never sees them, which is the misbehaving
// PDS's loss.
//
// The records array is split by a byte scan, not unmarshalled: the records
// past limit are counted without being kept, so a page costs about its
// size in memory however many elements it holds. (Unmarshalling the array
// kept a slice header and an allocation for every element: a 4 MiB body of
// "0," elements took 255 MiB, TestDecodePageMemoryIsBoundedByLimit.)
func decodePage(body []byte, repo syntax.DID, collection syntax.NSID, limit int) (Page, error) {
	out := struct {
		Records pageRecords `json:"records"`
		Cursor  *string     `json:"cursor"`
	}{Records: pageRecords{limit: limit}}
	if err := json.Unmarshal(body, &out); err != nil {
		return Page{}, fmt.Errorf("decode listRecords: %w", err)
	}
	if !out.Records.seen {
		return Page{}, errors.New("decode listRecords: no records array")
	}
	page := Page{OverLimit: out.Records.over}
	if out.Cursor != nil {
		if len(*out.Cursor) > maxCursorBytes {
			return Page{}, fmt.Errorf("decode listRecords: %w: %d bytes", ErrCursorTooLong, len(*out.Cursor))
		}
		page.Cursor = *out.Cursor
	}
	page.Records = make([]Record, 0, len(out.Records.kept))
	for _, raw := range out.Records.kept {
		var rr rawRecord
		if err := json.Unmarshal(raw, &rr); err != nil {
			page.Skipped++
			continue
		}
		rec, err := checkRecord(rr, repo, collection, "", true)
		if err != nil {
			page.Skipped++
			continue
		}
		page.Records = append(page.Records, rec)
	}
	return page, nil
}

// pageRecords is a listRecords answer's records array: its first limit
// elements kept, the rest counted. A null is no array; an array named
// twice counts as its last, as encoding/json has it for any member.
type pageRecords struct {
	limit int
	seen  bool
	kept  []json.RawMessage
	over  int
}

// UnmarshalJSON is handed the array's bytes by json.Unmarshal, which has
// checked the whole answer is valid JSON: so a scan that steps over
// strings and counts nesting finds the elements.
func (r *pageRecords) UnmarshalJSON(b []byte) error {
	r.seen, r.kept, r.over = false, nil, 0
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) > 0 && b[0] == 'n' { // null
		return nil
	}
	if len(b) == 0 || b[0] != '[' {
		return errors.New("records is not an array")
	}
	r.seen = true
	r.kept = []json.RawMessage{}
	// From just inside the opening bracket: depth 1 is the array's own.
	depth, from := 1, 1
	element := func(end int) {
		raw := bytes.TrimSpace(b[from:end])
		switch {
		case len(raw) == 0: // the inside of [], the only empty element valid JSON has
		case len(r.kept) < r.limit:
			r.kept = append(r.kept, bytes.Clone(raw))
		default:
			r.over++
		}
	}
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = closingQuote(b, i)
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				element(i)
				return nil
			}
		case ',':
			if depth == 1 {
				element(i)
				from = i + 1
			}
		}
	}
	return errors.New("records array not closed")
}

// checkRecord validates a record against the (repo, collection[, rkey]) it
// was asked for. listRecords always sends a cid; getRecord may omit it.
func checkRecord(rr rawRecord, repo syntax.DID, collection syntax.NSID, rkey syntax.RecordKey, needCID bool) (Record, error) {
	uri, err := syntax.ParseATURI(rr.URI)
	if err != nil {
		return Record{}, fmt.Errorf("uri: %w", err)
	}
	if uri.Authority().String() != repo.String() || uri.Collection() != collection {
		return Record{}, fmt.Errorf("uri %s is not in %s/%s", uri, repo, collection)
	}
	rk, err := syntax.ParseRecordKey(uri.RecordKey().String())
	if err != nil {
		return Record{}, fmt.Errorf("uri record key: %w", err)
	}
	if rkey != "" && rk != rkey {
		return Record{}, fmt.Errorf("uri %s is not record %s", uri, rkey)
	}
	var cid string
	if rr.CID != nil {
		c, err := syntax.ParseCID(*rr.CID)
		if err != nil {
			return Record{}, fmt.Errorf("cid: %w", err)
		}
		cid = c.String()
	} else if needCID {
		return Record{}, errors.New("no cid")
	}
	if len(rr.Value) == 0 || rr.Value[0] != '{' {
		return Record{}, errors.New("value is not an object")
	}
	if len(rr.Value) > MaxRecordBytes {
		return Record{}, fmt.Errorf("value is %d bytes, limit %d", len(rr.Value), MaxRecordBytes)
	}
	// encoding/json lets invalid UTF-8 inside strings through, and Value is
	// stored and later written into getFeed responses byte for byte: such a
	// record is refused here, as the Jetstream decoder refuses such frames.
	if !utf8.Valid(rr.Value) {
		return Record{}, errors.New("value is not valid UTF-8")
	}
	if jsontext.LoneSurrogate(rr.Value) {
		return Record{}, errors.New("value escapes a lone UTF-16 surrogate")
	}
	if deeperThan(rr.Value, MaxRecordDepth) {
		return Record{}, fmt.Errorf("value is nested deeper than %d", MaxRecordDepth)
	}
	// A map, not a struct: encoding/json matches struct fields without
	// regard to case, and "$TYPE" is not "$type".
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(rr.Value, &fields); err != nil {
		return Record{}, fmt.Errorf("value: %w", err)
	}
	var typ string
	if err := json.Unmarshal(fields["$type"], &typ); err != nil {
		return Record{}, errors.New("value has no string $type")
	}
	if typ != collection.String() {
		return Record{}, fmt.Errorf("value $type %q is not %s", truncate(typ, 64), collection)
	}
	return Record{URI: uri, RKey: rk, CID: cid, Value: rr.Value}, nil
}

// deeperThan says whether the JSON value v nests objects and arrays deeper
// than max. v must be valid JSON (it was decoded from the answer), so a
// byte scan that steps over strings is enough.
func deeperThan(v []byte, max int) bool {
	depth := 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			i = closingQuote(v, i)
		case '{', '[':
			if depth++; depth > max {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// closingQuote is the index of the quote that closes the JSON string
// opening at b[i] (len(b) if none): the scans above step over strings, so
// brackets and commas inside them count for nothing.
func closingQuote(b []byte, i int) int {
	for i++; i < len(b) && b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i
}
