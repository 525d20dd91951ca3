package feeds

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// upstreamClockSlack is how far a PDS's clock may lag ours before a record
// it wrote after one of our listings was fetched could look older than
// that listing. A stored record at least this much newer than the fetch is
// never taken for one the listing lacks.
const upstreamClockSlack = 5 * time.Minute

// aboveEveryRecordKey sorts after every valid record key (their characters
// are all ASCII below 0x7f): the open upper end of a span.
const aboveEveryRecordKey = "\x7f"

// unlistedSuffix marks the revision of a tombstone a listing inferred
// (reconcileSpan), as against one the stream delivered: a later listing
// that finds the record again may clear it (listedOver). It sorts below
// the digits a notified write appends to the same base (notifiedRev), so
// notifyOfUpdate, which reads the record after the listing, wins over it
// as over a stream tombstone of the same rev.
const unlistedSuffix = ".-unlisted"

// KeySpan is a stretch of record keys a listing page speaks for whole:
// every record the PDS held in it when the page was fetched is in the
// page. A PDS lists keys newest first, so a page's span runs from its
// lowest key up to the lowest key of the page before it.
type KeySpan struct {
	// From is the lowest key of the span, inclusive; "" for no lower end
	// (the listing's last page).
	From string
	// Below is the key the span ends under, exclusive; "" for no upper end
	// (the first page of a round).
	Below string
}

// listingRev is the revision a listing fetched at asOf speaks at: a TID
// upstreamClockSlack older than the fetch. Zero asOf: "" (older than any).
func listingRev(asOf time.Time) string {
	if asOf.IsZero() {
		return ""
	}
	return syntax.NewTIDFromTime(asOf.Add(-upstreamClockSlack), 0).String()
}

// notifiedSince reports whether a stored revision is a notified write's
// (notifiedRev: a base, a dot, the read time in µs) read at or after
// afterUS: a listing fetched before that read cannot judge it.
func notifiedSince(rev string, afterUS int64) bool {
	_, suffix, ok := strings.Cut(rev, ".")
	if !ok {
		return false
	}
	us, err := strconv.ParseInt(suffix, 10, 64)
	return err != nil || us >= afterUS
}

// listedOver reports whether a listing speaking at rev may write over a
// tombstone with tombstoneRev: only one an earlier listing inferred, and
// older than this listing. A tombstone the stream delivered always wins.
func listedOver(tombstoneRev, rev string) bool {
	base, ok := strings.CutSuffix(tombstoneRev, unlistedSuffix)
	return ok && rev != "" && base < rev
}

// The keys of one account's stored records and follows in a span.
// records_by_author holds the account's records together; records_by_key
// leads with the record key and would walk every account's keys in range.
const (
	recordKeysInSpan = `SELECT rkey, rev FROM records INDEXED BY records_by_author
		WHERE actor_id = ?1 AND collection_id = ?2 AND rkey >= ?3 AND rkey < ?4`
	followKeysInSpan = `SELECT rkey, rev FROM follows
		WHERE actor_id = ?1 AND collection_id = ?2 AND rkey >= ?3 AND rkey < ?4`
)

// reconcileSpan deletes the account's stored records (or follows) in the
// page's span that the page does not list: the PDS no longer has them, so
// they were deleted while the stream could not tell us (a gap, or before
// the daemon ran). Each goes through the stream's own delete, at a
// revision just older than the fetch: it leaves feeds and leaves a
// tombstone, and a record the stream stored after the fetch, or a replayed
// create older than it, changes nothing (the usual rev comparisons). A
// notified write read after the fetch carries no such revision and is
// skipped by its read time.
func (w *txWriter) reconcileSpan(p *ListingPage, actorID, collID int64, isFollow bool) (int, error) {
	sp := p.Span
	listed := make(map[string]struct{}, len(p.Records))
	for i := range p.Records {
		listed[string(p.Records[i].RKey)] = struct{}{}
	}
	below := sp.Below
	if below == "" {
		below = aboveEveryRecordKey
	}
	query := recordKeysInSpan
	if isFollow {
		query = followKeysInSpan
	}
	rows, err := w.tx.QueryContext(w.ctx, query, actorID, collID, sp.From, below)
	if err != nil {
		return 0, fmt.Errorf("read stored keys: %w", err)
	}
	var gone []string
	fetchedUS := p.FetchedAt.Add(-upstreamClockSlack).UnixMicro()
	for rows.Next() {
		var rkey, rev string
		if err := rows.Scan(&rkey, &rev); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read stored keys: %w", err)
		}
		if _, ok := listed[rkey]; !ok && !notifiedSince(rev, fetchedUS) {
			gone = append(gone, rkey)
		}
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("read stored keys: %w", err)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read stored keys: %w", err)
	}

	rev := listingRev(p.FetchedAt) + unlistedSuffix
	// Tombstones age in event time, like every delete.
	timeUS := w.s.Cursor().TimeUS
	if timeUS == 0 {
		timeUS = p.FetchedAt.UnixMicro()
	}
	removed := 0
	for _, rkey := range gone {
		c := Change{DID: p.Account, Collection: p.Collection, RKey: syntax.RecordKey(rkey),
			Op: OpDelete, Rev: rev, TimeUS: timeUS}
		before := w.res.Applied
		if err := w.apply(&c); err != nil {
			return removed, fmt.Errorf("remove %s unlisted: %w", rkey, err)
		}
		if w.res.Applied > before {
			removed++
		}
	}
	return removed, nil
}
