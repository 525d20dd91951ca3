package crashtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	_ "modernc.org/sqlite" // the driver the daemon uses
)

// OpenReadOnly opens the daemon's database without the power to change it:
// a read-only connection never checkpoints the WAL a killed daemon left, so
// the restart finds the file exactly as the kill left it.
func OpenReadOnly(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(5000)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// ReadCursor returns the stored Jetstream cursor: 0 when the database, its
// schema or the row does not exist yet (a kill during the first start).
func ReadCursor(ctx context.Context, path string) (int64, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	db, err := OpenReadOnly(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return readCursor(ctx, db)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func readCursor(ctx context.Context, q queryer) (int64, error) {
	var t int64
	err := q.QueryRowContext(ctx, `SELECT time_us FROM cursors WHERE kind = 'jetstream'`).Scan(&t)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil && strings.Contains(err.Error(), "no such table"):
		return 0, nil
	}
	return t, err
}

// DBState is what the database holds, in the model's terms.
type DBState struct {
	CursorUS int64
	Follows  map[key]followRec
	Posts    map[key]postRec
	// Feeds[viewer] are the viewer's feed rows in the one lane.
	Feeds map[int32][]feedRow
	// Orphans are feed rows whose record is gone.
	Orphans int
}

type feedRow struct {
	author int32
	rkey   string
	sortUS int64
}

// ReadState reads the whole state in one read transaction, so it is
// consistent even while the daemon writes. accounts maps DIDs to indexes.
func ReadState(ctx context.Context, path string, accounts map[string]int32) (*DBState, error) {
	db, err := OpenReadOnly(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	st := &DBState{Follows: map[key]followRec{}, Posts: map[key]postRec{}, Feeds: map[int32][]feedRow{}}
	if st.CursorUS, err = readCursor(ctx, tx); err != nil {
		return nil, fmt.Errorf("read cursor: %w", err)
	}
	did := func(s string) (int32, error) {
		i, ok := accounts[s]
		if !ok {
			return 0, fmt.Errorf("unknown DID %q in the database", s)
		}
		return i, nil
	}
	err = each(ctx, tx, `SELECT a.did, f.rkey, s.did, f.rev FROM follows f
		JOIN actors a ON a.id = f.actor_id JOIN actors s ON s.id = f.subject_id`,
		func(r *sql.Rows) error {
			var a, rkey, s, rev string
			if err := r.Scan(&a, &rkey, &s, &rev); err != nil {
				return err
			}
			ai, err := did(a)
			if err != nil {
				return err
			}
			si, err := did(s)
			if err != nil {
				return err
			}
			st.Follows[key{ai, rkey}] = followRec{rev: rev, live: true, subject: si}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read follows: %w", err)
	}
	err = each(ctx, tx, `SELECT a.did, r.rkey, r.cid, r.rev, r.sort_us, r.indexed_us FROM records r
		JOIN actors a ON a.id = r.actor_id`,
		func(r *sql.Rows) error {
			var a, rkey string
			var p postRec
			if err := r.Scan(&a, &rkey, &p.cid, &p.rev, &p.sortUS, &p.indexedUS); err != nil {
				return err
			}
			ai, err := did(a)
			if err != nil {
				return err
			}
			p.live = true
			st.Posts[key{ai, rkey}] = p
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	err = eachFeedRow(ctx, tx, func(v, a, rkey string, sortUS int64, orphan bool) error {
		vi, err := did(v)
		if err != nil {
			return err
		}
		if orphan {
			st.Orphans++
			return nil
		}
		row := feedRow{rkey: rkey, sortUS: sortUS}
		if row.author, err = did(a); err != nil {
			return err
		}
		st.Feeds[vi] = append(st.Feeds[vi], row)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read feed items: %w", err)
	}
	return st, nil
}

// eachFeedRow calls fn for every feed row: its viewer, and the author and
// record key of its record, or orphan when the record is gone.
func eachFeedRow(ctx context.Context, tx *sql.Tx, fn func(viewer, author, rkey string, sortUS int64, orphan bool) error) error {
	return each(ctx, tx, `SELECT v.did, a.did, r.rkey, fi.sort_us FROM feed_items fi
		JOIN actors v ON v.id = fi.viewer_id
		LEFT JOIN records r ON r.id = fi.record_id
		LEFT JOIN actors a ON a.id = r.actor_id`,
		func(r *sql.Rows) error {
			var v string
			var a, rkey sql.NullString
			var sortUS int64
			if err := r.Scan(&v, &a, &rkey, &sortUS); err != nil {
				return err
			}
			return fn(v, a.String, rkey.String, sortUS, !a.Valid)
		})
}

func each(ctx context.Context, tx *sql.Tx, query string, fn func(*sql.Rows) error, args ...any) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return nil // killed before the schema existed
		}
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
