package crashtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
)

// ListingKey names one account's collection listing.
type ListingKey struct {
	DID, Collection string
}

// ListingRow is a stored PDS listing cursor.
type ListingRow struct {
	Round, Page, Fetched, Attempts int
	Cursor                         string
	Complete                       bool
}

// behind reports whether l is an earlier position than o: an earlier
// round, or in the same round an earlier page, fewer records fetched, or
// no longer complete.
func (l ListingRow) behind(o ListingRow) bool {
	if l.Round != o.Round {
		return l.Round < o.Round
	}
	return l.Page < o.Page || l.Fetched < o.Fetched || (o.Complete && !l.Complete)
}

// FirstReadState is what the database holds of first reads, by DID.
type FirstReadState struct {
	Listings map[ListingKey]ListingRow
	// Follows[did][rkey] is the subject DID.
	Follows map[string]map[string]string
	// Posts[did][rkey] is the stored post.
	Posts map[string]map[string]storedPost
	// Viewers[did] is the first-read state: pending or complete.
	Viewers map[string]string
	// Feeds[viewer] are the viewer's feed rows.
	Feeds   map[string][]storedFeedRow
	Orphans int
}

type storedPost struct {
	cid               string
	sortUS, indexedUS int64
}

type storedFeedRow struct {
	author, rkey string
	sortUS       int64
}

// ReadListings returns the stored listing cursors; none before the
// database exists.
func ReadListings(ctx context.Context, path string) (map[ListingKey]ListingRow, error) {
	out := map[ListingKey]ListingRow{}
	return out, readTx(ctx, path, func(tx *sql.Tx) error { return readListings(ctx, tx, out) })
}

func readListings(ctx context.Context, tx *sql.Tx, out map[ListingKey]ListingRow) error {
	return each(ctx, tx, `SELECT a.did, c.nsid, l.round, l.page, l.fetched, l.attempts, l.cursor, l.complete
		FROM listings l JOIN actors a ON a.id = l.actor_id JOIN collections c ON c.id = l.collection_id`,
		func(r *sql.Rows) error {
			var k ListingKey
			var l ListingRow
			if err := r.Scan(&k.DID, &k.Collection, &l.Round, &l.Page, &l.Fetched, &l.Attempts, &l.Cursor, &l.Complete); err != nil {
				return err
			}
			out[k] = l
			return nil
		})
}

// ReadViewerStates returns each viewer's first-read state (pending or
// complete) in feed; none before the database exists.
func ReadViewerStates(ctx context.Context, path, feed string) (map[string]string, error) {
	out := map[string]string{}
	return out, readTx(ctx, path, func(tx *sql.Tx) error { return readViewerStates(ctx, tx, feed, out) })
}

// readTx runs fn in one read transaction on the database at path, if it
// exists yet.
func readTx(ctx context.Context, path string, fn func(*sql.Tx) error) error {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	db, err := OpenReadOnly(path)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}

func readViewerStates(ctx context.Context, tx *sql.Tx, feed string, out map[string]string) error {
	return each(ctx, tx, `SELECT a.did, v.state FROM viewers v JOIN actors a ON a.id = v.actor_id WHERE v.feed = ?`,
		func(r *sql.Rows) error {
			var d, state string
			if err := r.Scan(&d, &state); err != nil {
				return err
			}
			out[d] = state
			return nil
		}, feed)
}

// ReadFirstReadState reads listings, follows, posts, viewers and feed
// rows in one read transaction, consistent even while the daemon writes.
func ReadFirstReadState(ctx context.Context, path, feed string) (*FirstReadState, error) {
	st := &FirstReadState{
		Listings: map[ListingKey]ListingRow{}, Follows: map[string]map[string]string{},
		Posts: map[string]map[string]storedPost{}, Viewers: map[string]string{}, Feeds: map[string][]storedFeedRow{},
	}
	err := readTx(ctx, path, func(tx *sql.Tx) error {
		if err := readListings(ctx, tx, st.Listings); err != nil {
			return fmt.Errorf("read listings: %w", err)
		}
		if err := readViewerStates(ctx, tx, feed, st.Viewers); err != nil {
			return fmt.Errorf("read viewers: %w", err)
		}
		err := each(ctx, tx, `SELECT a.did, f.rkey, s.did FROM follows f
			JOIN actors a ON a.id = f.actor_id JOIN actors s ON s.id = f.subject_id`,
			func(r *sql.Rows) error {
				var a, rkey, s string
				if err := r.Scan(&a, &rkey, &s); err != nil {
					return err
				}
				if st.Follows[a] == nil {
					st.Follows[a] = map[string]string{}
				}
				st.Follows[a][rkey] = s
				return nil
			})
		if err != nil {
			return fmt.Errorf("read follows: %w", err)
		}
		err = each(ctx, tx, `SELECT a.did, r.rkey, r.cid, r.sort_us, r.indexed_us FROM records r
			JOIN actors a ON a.id = r.actor_id`,
			func(r *sql.Rows) error {
				var a, rkey string
				var p storedPost
				if err := r.Scan(&a, &rkey, &p.cid, &p.sortUS, &p.indexedUS); err != nil {
					return err
				}
				if st.Posts[a] == nil {
					st.Posts[a] = map[string]storedPost{}
				}
				st.Posts[a][rkey] = p
				return nil
			})
		if err != nil {
			return fmt.Errorf("read records: %w", err)
		}
		return eachFeedRow(ctx, tx, func(viewer, author, rkey string, sortUS int64, orphan bool) error {
			if orphan {
				st.Orphans++
				return nil
			}
			st.Feeds[viewer] = append(st.Feeds[viewer], storedFeedRow{author: author, rkey: rkey, sortUS: sortUS})
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
