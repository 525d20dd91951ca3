package feeds

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// fieldBacklogSlice bounds one backlog slice: the stored records it
// examines (of any collection, in id order) in one transaction. Tests
// shrink Store.backlogSlice instead.
const fieldBacklogSlice = 1000

// fieldBacklogBytes also bounds one backlog slice: it stops after the
// record whose body brings the JSON read past this many bytes (at least
// one record a slice, so it always progresses). Extraction costs time in
// proportion to a record's size, and records may be up to 64 KiB: 1,000
// hostile ones would hold the write lock, which live ingest needs, for
// about half a second. 1 MiB keeps a slice to milliseconds while ordinary
// posts (well under 1 KiB each) still fill the 1,000-record bound first.
// Tests shrink Store.backlogBytes instead.
const fieldBacklogBytes = 1 << 20

// fieldBacklog is a declared field whose values are not yet extracted from
// the records stored before it was declared: those with after < id <= end.
type fieldBacklog struct {
	def        fieldDef
	after, end int64
}

type fieldKey struct {
	collectionID int64
	path         string
	kind         FieldKind
}

// syncFields writes the configured fields into record_field_defs inside
// syncLanes' transaction and loads them into memory. A field new to the
// database, or declared again after it left the config (ingest stopped
// extracting it meanwhile), gets a backlog over every stored record, which
// the sweep works off in bounded slices (extractBacklog). A field that
// left the config is disabled; its values stay until their records go.
func (s *Store) syncFields(ctx context.Context, tx *sql.Tx, feeds []Feed) error {
	type stored struct {
		id                       int64
		enabled                  bool
		backlogAfter, backlogEnd int64
	}
	existing := map[fieldKey]stored{}
	rows, err := tx.QueryContext(ctx, `SELECT id, collection_id, path, kind, enabled, backlog_after_id, backlog_end_id FROM record_field_defs`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var d stored
		var k fieldKey
		if err := rows.Scan(&d.id, &k.collectionID, &k.path, &k.kind, &d.enabled, &d.backlogAfter, &d.backlogEnd); err != nil {
			rows.Close()
			return err
		}
		existing[k] = d
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	// The backlog of a newly declared field: every record stored so far.
	var minID, maxID int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(min(id), 0) FROM records`).Scan(&minID); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM records`).Scan(&maxID); err != nil {
		return err
	}
	newAfter := max(minID-1, 0)

	wanted := map[fieldKey]int64{}
	for _, f := range feeds {
		for _, t := range f.Targets {
			l := s.laneByKey[laneKey{f.Name, t.Collection}]
			l.fields = map[string]laneField{}
			for _, fd := range t.Fields {
				k := fieldKey{l.collectionID, fd.Path, fd.Kind}
				id, ok := wanted[k]
				if !ok {
					d, found := existing[k]
					switch {
					case !found:
						err = tx.QueryRowContext(ctx, `
							INSERT INTO record_field_defs (collection_id, path, kind, backlog_after_id, backlog_end_id)
							VALUES (?, ?, ?, ?, ?) RETURNING id`,
							k.collectionID, k.path, string(k.kind), newAfter, maxID).Scan(&id)
						d = stored{backlogAfter: newAfter, backlogEnd: maxID}
					case !d.enabled:
						id = d.id
						_, err = tx.ExecContext(ctx, `
							UPDATE record_field_defs SET enabled = 1, backlog_after_id = ?2, backlog_end_id = ?3
							WHERE id = ?1`, id, newAfter, maxID)
						d.backlogAfter, d.backlogEnd = newAfter, maxID
					default:
						id = d.id
					}
					if err != nil {
						return fmt.Errorf("field %s of %s: %w", fd.Path, t.Collection, err)
					}
					wanted[k] = id
					def := fieldDef{id: id, collectionID: k.collectionID, path: splitFieldPath(k.path), kind: k.kind}
					s.fieldsByColl[k.collectionID] = append(s.fieldsByColl[k.collectionID], def)
					if d.backlogAfter < d.backlogEnd {
						s.fieldBacklog = append(s.fieldBacklog, &fieldBacklog{def: def, after: d.backlogAfter, end: d.backlogEnd})
					}
				}
				l.fields[fd.Name] = laneField{id: id, kind: fd.Kind}
			}
		}
	}
	s.metrics.setFieldBacklog(len(s.fieldBacklog))
	for k, d := range existing {
		if _, keep := wanted[k]; keep || !d.enabled {
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE record_field_defs SET enabled = 0 WHERE id = ?`, d.id); err != nil {
			return err
		}
	}
	return nil
}

// storeFields writes a stored record's field values, in the batch
// transaction that stores the record. replace drops the values of an
// earlier version first (an update).
func (w *txWriter) storeFields(recordID, collID int64, body []byte, replace bool) error {
	if replace {
		if _, err := w.exec(w.s.stmts.deleteFields, recordID); err != nil {
			return fmt.Errorf("drop field values: %w", err)
		}
	}
	defs := w.s.fieldsByColl[collID]
	if len(defs) == 0 {
		return nil
	}
	for i, vals := range extractFields(body, defs) {
		for _, v := range vals {
			if _, err := w.exec(w.s.stmts.insertField, recordID, defs[i].id, v); err != nil {
				return fmt.Errorf("store field value: %w", err)
			}
		}
	}
	return nil
}

// extractBacklog runs one bounded backlog slice: the next
// fieldBacklogSlice stored records, in id order, of the first field with
// a backlog get that field's values, stopping early once the bodies read
// reach fieldBacklogBytes; the saved position then covers only the
// records up to the last one extracted. Records written meanwhile got
// theirs at ingest; extracting them again replaces the same values. The
// caller holds writeMu.
func (s *Store) extractBacklog(ctx context.Context, res *SweepResult) error {
	if len(s.fieldBacklog) == 0 {
		return nil
	}
	b := s.fieldBacklog[0]
	w, err := s.beginCounting(ctx, &res.LockWait)
	if err != nil {
		return err
	}
	defer w.tx.Rollback()
	rows, err := w.tx.QueryContext(ctx, `
		SELECT id, collection_id = ?3 FROM records WHERE id > ?1 AND id <= ?2 ORDER BY id LIMIT ?4`,
		b.after, b.end, b.def.collectionID, s.backlogSlice)
	if err != nil {
		return fmt.Errorf("field backlog: %w", err)
	}
	var ids []int64
	examined, last := 0, b.after
	for rows.Next() {
		var id int64
		var match bool
		if err := rows.Scan(&id, &match); err != nil {
			rows.Close()
			return fmt.Errorf("field backlog: %w", err)
		}
		examined++
		last = id
		if match {
			ids = append(ids, id)
		}
	}
	// A scan that ended on an error is not a short slice: taken for one,
	// the backlog would be marked done past records never extracted.
	if err := rows.Err(); err != nil {
		rows.Close()
		return fmt.Errorf("field backlog: %w", err)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("field backlog: %w", err)
	}
	after := last
	if examined < s.backlogSlice {
		after = b.end
	}
	defs := []fieldDef{b.def}
	read := 0
	for i, id := range ids {
		var body []byte
		if err := w.tx.QueryRowContext(ctx, `SELECT body FROM records WHERE id = ?`, id).Scan(&body); err != nil {
			return fmt.Errorf("field backlog: read record: %w", err)
		}
		if _, err := w.tx.ExecContext(ctx, `DELETE FROM record_fields WHERE record_id = ? AND field_id = ?`, id, b.def.id); err != nil {
			return fmt.Errorf("field backlog: %w", err)
		}
		for _, v := range extractFields(body, defs)[0] {
			if _, err := w.exec(s.stmts.insertField, id, b.def.id, v); err != nil {
				return fmt.Errorf("field backlog: %w", err)
			}
		}
		// Past the byte bound, the records after this one wait for the
		// next slice: the position stops here, so none is skipped.
		if read += len(body); read >= s.backlogBytes && i < len(ids)-1 {
			ids, after = ids[:i+1], id
			break
		}
	}
	if _, err := w.tx.ExecContext(ctx, `UPDATE record_field_defs SET backlog_after_id = ? WHERE id = ?`, after, b.def.id); err != nil {
		return fmt.Errorf("field backlog: save position: %w", err)
	}
	if err := w.commit(); err != nil {
		return fmt.Errorf("field backlog: commit: %w", err)
	}
	b.after = after
	if b.after >= b.end {
		s.fieldBacklog = s.fieldBacklog[1:]
		s.metrics.setFieldBacklog(len(s.fieldBacklog))
		s.log.Info("field_backlog_done", "field", b.def.id, "path", strings.Join(b.def.path, "."))
	}
	res.FieldRecords += int64(len(ids))
	return nil
}

// FieldBacklog reports how many declared fields still have stored records
// to extract; until it is 0, a filtered page can miss older records.
func (s *Store) FieldBacklog() int {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return len(s.fieldBacklog)
}
