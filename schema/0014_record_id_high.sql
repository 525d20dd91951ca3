-- The highest record id ever handed out. SQLite gives a new row the
-- highest rowid + 1, so deleting the newest record let the next one take
-- its id; a page reads its keys and then the records its cache misses in
-- two statements, and a reused id read in between showed another record
-- under the deleted one's key. The writer hands ids out from here, and
-- never one twice.
CREATE TABLE record_id_high (
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    high INTEGER NOT NULL
);

INSERT INTO record_id_high (one, high) SELECT 1, coalesce(max(id), 0) FROM records;
