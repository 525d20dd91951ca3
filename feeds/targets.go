package feeds

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// applyTarget stores a target record and fans it out. A create inserts the
// record and queues it for the transaction's fan-out (fanout.go): one
// INSERT … SELECT writes a feed row for every viewer following the author. An update of a stored record rewrites its body in place (its
// feed position stays); a create finding a copy only a listing wrote
// also fans it out, as the listing did not. A delete removes it from its author's followers'
// feeds and leaves a tombstone against replays.
func (w *txWriter) applyTarget(c *Change, collID int64) error {
	st := w.s.stmts
	actorID, inScope, err := w.authorInScope(c.DID)
	if err != nil || !inScope {
		return err
	}
	if c.Op == OpCreate {
		if done, err := w.createNew(c, actorID, collID); err != nil || done {
			return err
		}
	}
	var recordID, sortUS int64
	var oldRev string
	found, err := w.queryRow(st.recordByKey, []any{actorID, collID, string(c.RKey)}, &recordID, &oldRev, &sortUS)
	if err != nil {
		return fmt.Errorf("look up record: %w", err)
	}

	if c.Op == OpDelete {
		if applies, err := w.buryDelete(actorID, collID, c, found, oldRev); err != nil || !applies {
			return err
		}
		if found {
			if err := w.unfeedRecord(actorID, collID, sortUS, recordID); err != nil {
				return err
			}
			if _, err := w.exec(st.deleteRecord, recordID); err != nil {
				return fmt.Errorf("delete record: %w", err)
			}
			w.recordChanged(recordID)
		}
		w.res.Applied++
		return nil
	}

	if found {
		if oldRev >= c.Rev {
			w.res.Duplicates++
			return nil
		}
		if _, err := w.exec(st.updateRecord, recordID, c.CID, c.Rev, string(c.Record)); err != nil {
			return fmt.Errorf("update record: %w", err)
		}
		w.recordChanged(recordID)
		if err := w.storeFields(recordID, collID, c.Record, true); err != nil {
			return err
		}
		if c.Op == OpCreate && oldRev == "" {
			// The stored copy is a listing's (listRecord), which reached
			// no feed but its own first read's: the record's create,
			// delivered after the listing, fans it out, as it would have
			// had the listing not come first
			// (TestAListedPostTheStreamThenCreatesReachesEveryFollower).
			if err := w.queueFanout(actorID, collID, sortUS, recordID); err != nil {
				return err
			}
		}
		w.res.Applied++
		return nil
	}
	exists, covers, err := w.tombstoned(actorID, collID, c.RKey, c.Rev)
	if err != nil {
		return err
	}
	if covers {
		w.res.Duplicates++
		return nil
	}
	if exists {
		if _, err := w.exec(st.deleteTombstone, actorID, collID, string(c.RKey)); err != nil {
			return fmt.Errorf("clear tombstone: %w", err)
		}
	}
	sortUS = c.SortKey()
	if recordID, _, err = w.insertRecord(st.insertRecord,
		actorID, collID, string(c.RKey), c.CID, c.Rev, sortUS, c.TimeUS, c.CreatedAtUS, string(c.Record)); err != nil {
		return fmt.Errorf("insert record: %w", err)
	}
	if err := w.storeFields(recordID, collID, c.Record, false); err != nil {
		return err
	}
	if err := w.queueFanout(actorID, collID, sortUS, recordID); err != nil {
		return err
	}
	w.cacheCreated(c, collID, sortUS, recordID)
	w.res.Applied++
	return nil
}

// createNew is the common case of a create: a key neither stored nor
// tombstoned. It inserts the record and queues its fan-out in one
// statement's check. done is false when the key is taken or tombstoned:
// the caller then looks the record up, compares revisions and reads the
// tombstone, as for an update.
func (w *txWriter) createNew(c *Change, actorID, collID int64) (done bool, err error) {
	st := w.s.stmts
	sortUS := c.SortKey()
	recordID, inserted, err := w.insertRecord(st.insertNewRecord,
		actorID, collID, string(c.RKey), c.CID, c.Rev, sortUS, c.TimeUS, c.CreatedAtUS, string(c.Record))
	if err != nil {
		return false, fmt.Errorf("insert record: %w", err)
	}
	if !inserted {
		return false, nil
	}
	if err := w.storeFields(recordID, collID, c.Record, false); err != nil {
		return false, err
	}
	if err := w.queueFanout(actorID, collID, sortUS, recordID); err != nil {
		return false, err
	}
	w.cacheCreated(c, collID, sortUS, recordID)
	w.res.Applied++
	return true, nil
}

// cacheCreated keeps a created record for the record cache, which takes
// it once the transaction commits (recordCache.created), while pages are
// being read: asked once a transaction, at its first create, so a
// catch-up nobody reads builds no entries. A record the read path would
// refuse (invalid JSON or UTF-8) is left for it to find.
func (w *txWriter) cacheCreated(c *Change, collID, sortUS, recordID int64) {
	if w.cacheCreates == 0 {
		w.cacheCreates = -1
		if w.s.recordCache.beingRead() {
			w.cacheCreates = 1
		}
	}
	if w.cacheCreates < 0 || !json.Valid(c.Record) || !utf8.Valid(c.Record) {
		return
	}
	r := &cachedRecord{id: recordID, collectionID: collID, sortUS: sortUS, timeUS: c.TimeUS}
	r.setBytes([]byte(c.DID), string(c.Collection), []byte(c.RKey), []byte(c.CID), c.Record)
	w.created = append(w.created, r)
	w.createdBytes += r.size()
	// A catch-up batch read meanwhile creates far more than the cache
	// holds: the newest, a quarter of the cache at most, are kept, so one
	// commit neither flushes what pages are reading nor holds a copy of
	// every record it wrote.
	for w.createdBytes > w.s.recordCache.maxBytes/4 && len(w.created) > 0 {
		w.createdBytes -= w.created[0].size()
		w.created[0] = nil
		w.created = w.created[1:]
	}
}

// unfeedRecord removes a record from every lane carrying its collection,
// through the author's followers.
func (w *txWriter) unfeedRecord(authorID, collID, sortUS, recordID int64) error {
	for i := range w.s.lanes {
		l := &w.s.lanes[i]
		if l.collectionID != collID {
			continue
		}
		n, err := w.exec(w.s.stmts.unfeedRecord, authorID, l.followCollID, l.id, sortUS, recordID)
		if err != nil {
			return fmt.Errorf("remove record from feed %s: %w", l.feed, err)
		}
		w.res.RemovedRows += n
	}
	return nil
}
