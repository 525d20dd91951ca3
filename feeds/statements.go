package feeds

import (
	"context"
	"database/sql"
	"fmt"
)

// writeSQL holds every statement of the ingest hot path. They are prepared
// once on the single writer connection and bound to each batch transaction,
// so a batch parses no SQL.
var writeSQL = struct {
	actorByDID, insertActor                               string
	followByKey, insertFollow, updateFollow, deleteFollow string
	followRemains                                         string
	recordByKey, insertRecord, updateRecord, deleteRecord string
	insertNewRecord                                       string
	tombstoneByKey, upsertTombstone, deleteTombstone      string
	merge, unmerge, unfeedRecord, unfeedAuthor            string
	viewerOfFollows, viewerOfFeed, followedByAnyone       string
	actorActive, actorStatus, listingByKey, wantListing   string
	actorDeleted                                          string
	insertField, deleteFields                             string
}{
	// insertField stores one extracted field value (fields_store.go); an
	// array holding a value twice stores it once.
	insertField:  `INSERT OR IGNORE INTO record_fields (record_id, field_id, value) VALUES (?, ?, ?)`,
	deleteFields: `DELETE FROM record_fields WHERE record_id = ?`,

	listingByKey: `SELECT round, page FROM listings WHERE actor_id = ? AND collection_id = ?`,
	// wantListing marks an account's target listing due at once (next
	// retry 1 µs after the epoch) unless it is complete, gone or already
	// scheduled: see wantListings.
	wantListing: `INSERT INTO listings (actor_id, collection_id, next_retry_us) VALUES (?, ?, 1)
		ON CONFLICT (actor_id, collection_id) DO UPDATE SET next_retry_us = 1
		WHERE complete = 0 AND gone = 0 AND next_retry_us = 0`,
	actorActive: `SELECT active FROM actors WHERE id = ?`,
	// actorStatus: whether the actor is active, and the time of the last
	// account event applied to it (schema 0010): the relay's when the
	// event carried it, else its time_us; then its relay sequence number
	// (0018), which breaks ties, or -1 when status_us is a time_us
	// (newerStatus).
	actorStatus: `SELECT active, status_us, status_seq FROM actors WHERE id = ?`,
	// actorDeleted: whether an account event deleted the actor (schema
	// 0016), and how many times one did (0017); a listing stores nothing
	// of a deleted account, nor across a deletion.
	actorDeleted: `SELECT deleted, deletions FROM actors WHERE id = ?`,
	// viewerOfFollows: is the actor a registered viewer of any feed built
	// from this follow collection? Decides whether its follows are stored.
	viewerOfFollows: `SELECT 1 FROM viewers v JOIN feed_targets t ON t.feed = v.feed
		WHERE v.actor_id = ? AND t.follow_collection_id = ? AND t.enabled = 1 LIMIT 1`,
	viewerOfFeed: `SELECT 1 FROM viewers WHERE actor_id = ? AND feed = ?`,
	// followedByAnyone: only viewers' follows are stored, so any stored
	// follow of the author puts its targets in scope; but not its own
	// (following yourself never puts your records in your feed, and a
	// self-follow that put them in scope neither took them out when it
	// was deleted nor wanted the account's listings).
	followedByAnyone: `SELECT 1 FROM follows WHERE subject_id = ?1 AND actor_id <> ?1 LIMIT 1`,

	actorByDID:  `SELECT id FROM actors WHERE did = ?`,
	insertActor: `INSERT INTO actors (did) VALUES (?) RETURNING id`,

	followByKey:   `SELECT subject_id, rev FROM follows WHERE actor_id = ? AND collection_id = ? AND rkey = ?`,
	insertFollow:  `INSERT INTO follows (actor_id, collection_id, rkey, subject_id, rev) VALUES (?, ?, ?, ?, ?)`,
	updateFollow:  `UPDATE follows SET subject_id = ?4, rev = ?5 WHERE actor_id = ?1 AND collection_id = ?2 AND rkey = ?3`,
	deleteFollow:  `DELETE FROM follows WHERE actor_id = ? AND collection_id = ? AND rkey = ?`,
	followRemains: `SELECT 1 FROM follows WHERE subject_id = ? AND collection_id = ? AND actor_id = ? LIMIT 1`,

	recordByKey: `SELECT id, rev, sort_us FROM records WHERE actor_id = ? AND collection_id = ? AND rkey = ?`,
	// The record inserts take the new id as ?10, from txWriter.newRecordID:
	// never one handed out before.
	insertRecord: `INSERT INTO records (id, actor_id, collection_id, rkey, cid, rev, sort_us, indexed_us, created_us, body)
		VALUES (?10, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`,
	// insertNewRecord is a create's first try: it changes no row when the
	// key is already stored (a replay or a late create) or a tombstone
	// lies on it, and only then is the record looked up and the tombstone
	// read. It saves the common create the lookup's descent of
	// records_by_key, which the insert's uniqueness check makes anyway,
	// and a statement of its own for the tombstone probe. It is run as an
	// exec, whether it inserted read from the result (txWriter.insertRecord): a RETURNING
	// clause would make it a query, which costs database/sql a goroutine
	// per call inside a transaction.
	insertNewRecord: `INSERT INTO records (id, actor_id, collection_id, rkey, cid, rev, sort_us, indexed_us, created_us, body)
		SELECT ?10, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
		WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE actor_id = ?1 AND collection_id = ?2 AND rkey = ?3)
		ON CONFLICT (actor_id, collection_id, rkey) DO NOTHING`,
	updateRecord: `UPDATE records SET cid = ?2, rev = ?3, body = ?4 WHERE id = ?1`,
	deleteRecord: `DELETE FROM records WHERE id = ?`,

	tombstoneByKey: `SELECT rev FROM tombstones WHERE actor_id = ? AND collection_id = ? AND rkey = ?`,
	upsertTombstone: `INSERT INTO tombstones (actor_id, collection_id, rkey, rev, deleted_us) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (actor_id, collection_id, rkey) DO UPDATE SET rev = excluded.rev, deleted_us = excluded.deleted_us
		WHERE excluded.rev > tombstones.rev`,
	deleteTombstone: `DELETE FROM tombstones WHERE actor_id = ? AND collection_id = ? AND rkey = ?`,

	// merge brings a new followee's newest stored records into one lane of
	// the follower's feed, unless the followee is inactive (deactivated,
	// taken down): its records wait for it to come back (applyAccount).
	merge: `INSERT OR IGNORE INTO feed_items (viewer_id, target_id, sort_us, record_id)
		SELECT ?1, ?2, r.sort_us, r.id FROM records r
		WHERE r.actor_id = ?3 AND r.collection_id = ?4
			AND EXISTS (SELECT 1 FROM actors a WHERE a.id = ?3 AND a.active = 1)
		ORDER BY r.sort_us DESC LIMIT ?5`,

	// unmerge removes an unfollowed account's items from one lane.
	unmerge: `DELETE FROM feed_items
		WHERE viewer_id = ?1 AND target_id = ?2
		AND record_id IN (SELECT id FROM records WHERE actor_id = ?3 AND collection_id = ?4)`,

	// unfeedRecord removes a record from one lane of every feed holding
	// it. Only followers of the author hold it, so their ids come from
	// follows_by_subject and each row is one primary-key seek: the cost of
	// the fan-out that wrote them, never a scan of the feed table.
	unfeedRecord: `DELETE FROM feed_items
		WHERE viewer_id IN (SELECT actor_id FROM follows WHERE subject_id = ?1 AND collection_id = ?2)
		AND target_id = ?3 AND sort_us = ?4 AND record_id = ?5`,

	// unfeedAuthor removes all of an author's records from one lane of its
	// followers' feeds (an account gone inactive); each follower's lane is
	// a primary-key range of at most its cap.
	unfeedAuthor: `DELETE FROM feed_items
		WHERE viewer_id IN (SELECT actor_id FROM follows WHERE subject_id = ?1 AND collection_id = ?2)
		AND target_id = ?3
		AND record_id IN (SELECT id FROM records WHERE actor_id = ?1 AND collection_id = ?4)`,
}

type statements struct {
	actorByDID, insertActor                               *sql.Stmt
	followByKey, insertFollow, updateFollow, deleteFollow *sql.Stmt
	followRemains                                         *sql.Stmt
	recordByKey, insertRecord, updateRecord, deleteRecord *sql.Stmt
	insertNewRecord                                       *sql.Stmt
	tombstoneByKey, upsertTombstone, deleteTombstone      *sql.Stmt
	merge, unmerge, unfeedRecord, unfeedAuthor            *sql.Stmt
	viewerOfFollows, viewerOfFeed, followedByAnyone       *sql.Stmt
	actorActive, actorStatus, listingByKey, wantListing   *sql.Stmt
	actorDeleted                                          *sql.Stmt
	insertField, deleteFields                             *sql.Stmt
	fan                                                   *fanoutStatements // fanout.go
}

func prepareStatements(ctx context.Context, db *sql.DB, audienceImplied bool) (*statements, error) {
	st := &statements{}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&st.actorByDID, writeSQL.actorByDID}, {&st.insertActor, writeSQL.insertActor},
		{&st.followByKey, writeSQL.followByKey}, {&st.insertFollow, writeSQL.insertFollow},
		{&st.updateFollow, writeSQL.updateFollow}, {&st.deleteFollow, writeSQL.deleteFollow},
		{&st.followRemains, writeSQL.followRemains},
		{&st.recordByKey, writeSQL.recordByKey}, {&st.insertRecord, writeSQL.insertRecord},
		{&st.insertNewRecord, writeSQL.insertNewRecord},
		{&st.updateRecord, writeSQL.updateRecord}, {&st.deleteRecord, writeSQL.deleteRecord},
		{&st.tombstoneByKey, writeSQL.tombstoneByKey}, {&st.upsertTombstone, writeSQL.upsertTombstone},
		{&st.deleteTombstone, writeSQL.deleteTombstone},
		{&st.merge, writeSQL.merge},
		{&st.viewerOfFollows, writeSQL.viewerOfFollows}, {&st.viewerOfFeed, writeSQL.viewerOfFeed},
		{&st.followedByAnyone, writeSQL.followedByAnyone}, {&st.actorActive, writeSQL.actorActive},
		{&st.actorStatus, writeSQL.actorStatus}, {&st.actorDeleted, writeSQL.actorDeleted},
		{&st.listingByKey, writeSQL.listingByKey}, {&st.wantListing, writeSQL.wantListing},
		{&st.unmerge, writeSQL.unmerge}, {&st.unfeedRecord, writeSQL.unfeedRecord},
		{&st.unfeedAuthor, writeSQL.unfeedAuthor},
		{&st.insertField, writeSQL.insertField}, {&st.deleteFields, writeSQL.deleteFields},
	} {
		s, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
		*p.dst = s
	}
	fan, err := prepareFanout(ctx, db, audienceImplied)
	if err != nil {
		return nil, err
	}
	st.fan = fan
	return st, nil
}
