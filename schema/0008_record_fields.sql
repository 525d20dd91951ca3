-- Queryable fields (getFeed filters, issue 6). A target collection may
-- declare fields in the config; their values are extracted from record
-- JSON into record_fields when a record is stored, so a filtered page
-- checks each feed row with one index seek instead of parsing its body.

-- One row per distinct extraction: (collection, JSON path, kind). Feeds
-- that declare the same field over the same collection share it; the
-- config's field name is only a request parameter and is not stored.
CREATE TABLE record_field_defs (
    id               INTEGER PRIMARY KEY,
    collection_id    INTEGER NOT NULL REFERENCES collections (id),
    path             TEXT    NOT NULL,
    -- equality (text), datetime (unix microseconds) or integer.
    kind             TEXT    NOT NULL,
    -- 0 once the field left the config: no longer extracted at ingest.
    enabled          INTEGER NOT NULL DEFAULT 1,
    -- The backlog: records with backlog_after_id < id <= backlog_end_id
    -- were stored before the field was (re)declared and are extracted in
    -- bounded slices by the sweep. Equal values mean no backlog.
    backlog_after_id INTEGER NOT NULL DEFAULT 0,
    backlog_end_id   INTEGER NOT NULL DEFAULT 0,
    UNIQUE (collection_id, path, kind)
);

-- Extracted values: at most a few per (record, field), arrays giving one
-- row per element. The key order serves the filtered page read, which
-- asks "does this record have this value?" of each feed row it walks, and
-- the cascade that removes a record's values with the record on every
-- delete path (stream delete, account deletion, retention).
CREATE TABLE record_fields (
    record_id INTEGER NOT NULL REFERENCES records (id) ON DELETE CASCADE,
    field_id  INTEGER NOT NULL,
    value     NOT NULL,
    PRIMARY KEY (record_id, field_id, value)
) WITHOUT ROWID;
