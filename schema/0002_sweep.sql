-- The prune sweep and bounded storage (issue 4).

-- One row: where the rolling sweep stands, what the last full pass did,
-- and where the retention scan stands. Written in the same transaction as
-- the deletes it describes.
CREATE TABLE sweep_state (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    -- The rolling cursor: the last viewer id a slice visited, 0 at the
    -- start of a pass.
    cursor_viewer    INTEGER NOT NULL DEFAULT 0,
    -- The pass in progress: when its first slice ran (clock time, unix
    -- microseconds; 0 before it starts) and the rows it has deleted so far.
    pass_started_us  INTEGER NOT NULL DEFAULT 0,
    pass_rows        INTEGER NOT NULL DEFAULT 0,
    -- The last full pass. 0 means none yet, so the first pass is due at
    -- once: an upgraded database has never been swept.
    last_pass_end_us INTEGER NOT NULL DEFAULT 0,
    last_pass_lap_us INTEGER NOT NULL DEFAULT 0,
    last_pass_rows   INTEGER NOT NULL DEFAULT 0,
    -- The retention scan's position in records_by_indexed, (indexed_us, id).
    retain_after_us  INTEGER NOT NULL DEFAULT 0,
    retain_after_id  INTEGER NOT NULL DEFAULT 0
);

INSERT INTO sweep_state (id) VALUES (1);

-- Viewers whose feeds grew, served before the rolling cursor. A fan-out can
-- reach a million viewers in one statement, so it records one row per
-- (author, follow collection) and slices expand it through
-- follows_by_subject, after_id being the last follower already trimmed. A
-- follow merge records its one viewer. Bounded: when full, new entries are
-- dropped and the rolling cursor covers them.
CREATE TABLE sweep_grown (
    id            INTEGER PRIMARY KEY,
    viewer_id     INTEGER UNIQUE,
    author_id     INTEGER,
    collection_id INTEGER,
    after_id      INTEGER NOT NULL DEFAULT 0,
    -- The author posted again while the entry was being expanded: the
    -- followers already passed grew again, so the entry goes round once more.
    again         INTEGER NOT NULL DEFAULT 0,
    UNIQUE (author_id, collection_id),
    CHECK ((viewer_id IS NULL) <> (author_id IS NULL))
);

-- Serves the retention scan: target records in indexed (event) time order.
CREATE INDEX records_by_indexed ON records (indexed_us);

-- Serves tombstone expiry.
CREATE INDEX tombstones_by_deleted ON tombstones (deleted_us);
