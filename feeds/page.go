package feeds

import (
	"encoding/json"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// PageKey is the position of an item in a feed: its sort key and the
// record id as a unique tiebreaker, compared as a row value so the primary
// key index serves pagination and items that share a timestamp are never
// skipped.
type PageKey struct {
	SortUS   int64
	RecordID int64
}

// PageQuery asks for one page of a viewer's feed, newest first.
type PageQuery struct {
	Feed       string
	Viewer     syntax.DID
	Collection syntax.NSID
	Limit      int
	// Before, when set, returns items strictly older than this key.
	Before *PageKey
	// Filters keep only records matching every one (read_filter.go).
	Filters []Filter
	// ScanLimit bounds the feed rows a filtered page examines; 0 means
	// DefaultScanLimit.
	ScanLimit int
}

// Filter is one condition on a declared field of the page's collection:
// Equals for an equality field; Min and Max, both inclusive, for a range
// field (math.MinInt64 and math.MaxInt64 leave a side open). Values are
// what ParseFieldValue returns.
type Filter struct {
	Field    string
	Equals   string
	Min, Max int64
}

// Item is one record in a feed page.
type Item struct {
	URI        string
	CID        string
	DID        string
	Collection string
	RKey       string
	TimeUS     int64
	// Value is the record, valid JSON: checked once, when it was read
	// from the database (readMissing).
	Value json.RawMessage
	Key   PageKey
}

// Page is a run of items; Next is set when more items may follow. A
// filtered page may hold fewer than the limit (even none) and still have a
// Next: its scan bound ran out first.
type Page struct {
	Items []Item
	Next  *PageKey
	// Examined is how many feed rows a filtered read looked at.
	Examined int
}
