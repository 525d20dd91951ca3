package backfill

import (
	"hash/maphash"

	"github.com/atfeeds/appview/feeds"
)

// pageCycle notices a PDS that pages in circles within one round of a
// listing: a cursor it answered before, or a page whose records are all
// ones the round listed already. Comparing a cursor with the one just
// sent was the only guard, so a PDS alternating two cursors over the
// same records was read to the listing's limit: 5,000 requests and as
// many page writes for a viewer who follows one account (a review). A
// round that pages in circles ends as one whose cursor does not advance.
//
// It keeps hashes, at most maxCycleKeys of each kind: past that the
// listing's own limit (maxRecords) is the bound. Keys are not assumed to
// come in order, so a PDS listing oldest first still pages on.
type pageCycle struct {
	seed    maphash.Seed
	cursors map[uint64]struct{}
	keys    map[uint64]struct{}
}

// maxCycleKeys bounds each of a pageCycle's sets: a follow listing's
// default limit (MaxFollows) is 10,000 records.
const maxCycleKeys = 20_000

func newPageCycle() *pageCycle {
	return &pageCycle{seed: maphash.MakeSeed(), cursors: map[uint64]struct{}{}, keys: map[uint64]struct{}{}}
}

// circles notes a page, its cursor and the records of it that parsed,
// and reports whether it shows the PDS paging in circles. A page whose
// records were all dropped says nothing by its keys.
func (c *pageCycle) circles(cursor string, records []feeds.ListedRecord) bool {
	repeated := false
	if cursor != "" {
		repeated = !c.note(c.cursors, cursor)
	}
	fresh := false
	for i := range records {
		if c.note(c.keys, string(records[i].RKey)) {
			fresh = true
		}
	}
	return repeated || (len(records) > 0 && !fresh)
}

// note adds s to set and reports whether it was new there; a full set
// takes nothing more, and calls everything new.
func (c *pageCycle) note(set map[uint64]struct{}, s string) bool {
	h := maphash.String(c.seed, s)
	if _, seen := set[h]; seen {
		return false
	}
	if len(set) < maxCycleKeys {
		set[h] = struct{}{}
	}
	return true
}
