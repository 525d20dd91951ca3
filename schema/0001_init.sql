-- The data model is shaped for fan-out speed: every hot table is keyed by
-- small integers (interned actors, collections and records) so that one
-- INSERT ... SELECT writes a feed row per viewer in a few bytes.

-- Interned DIDs. Rows are never deleted, so ids stay stable for caches.
CREATE TABLE actors (
    id     INTEGER PRIMARY KEY,
    did    TEXT    NOT NULL UNIQUE,
    handle TEXT,
    active INTEGER NOT NULL DEFAULT 1
);

-- Interned collection NSIDs.
CREATE TABLE collections (
    id   INTEGER PRIMARY KEY,
    nsid TEXT    NOT NULL UNIQUE
);

-- One lane per (feed, target collection) of the configuration, synced at
-- start. A feed row names its lane, so two feeds over the same collection
-- keep their own items and caps.
CREATE TABLE feed_targets (
    id                   INTEGER PRIMARY KEY,
    feed                 TEXT    NOT NULL,
    collection_id        INTEGER NOT NULL REFERENCES collections (id),
    follow_collection_id INTEGER NOT NULL REFERENCES collections (id),
    cap                  INTEGER NOT NULL,
    merge_limit          INTEGER NOT NULL,
    enabled              INTEGER NOT NULL DEFAULT 1,
    UNIQUE (feed, collection_id)
);

-- Follow records of any follow collection; the subject is the record's
-- top-level "subject" DID.
CREATE TABLE follows (
    actor_id      INTEGER NOT NULL,
    collection_id INTEGER NOT NULL,
    rkey          TEXT    NOT NULL,
    subject_id    INTEGER NOT NULL,
    rev           TEXT    NOT NULL,
    PRIMARY KEY (actor_id, collection_id, rkey)
) WITHOUT ROWID;

-- Serves the fan-out join (who follows this author?) and the
-- "another follow of the same subject remains" check on unfollow.
CREATE INDEX follows_by_subject ON follows (subject_id, collection_id, actor_id);

-- Target records (posts first). sort_us is min(indexed_us, created_us).
CREATE TABLE records (
    id            INTEGER PRIMARY KEY,
    actor_id      INTEGER NOT NULL,
    collection_id INTEGER NOT NULL,
    rkey          TEXT    NOT NULL,
    cid           TEXT    NOT NULL,
    rev           TEXT    NOT NULL,
    sort_us       INTEGER NOT NULL,
    indexed_us    INTEGER NOT NULL,
    created_us    INTEGER NOT NULL,
    body          TEXT    NOT NULL
);

CREATE UNIQUE INDEX records_by_key ON records (actor_id, collection_id, rkey);

-- Serves the follow merge: an author's newest records of a collection.
CREATE INDEX records_by_author ON records (actor_id, collection_id, sort_us);

-- Deleted records and follows, with the rev of the delete, so a replayed
-- create with an older rev cannot resurrect them.
CREATE TABLE tombstones (
    actor_id      INTEGER NOT NULL,
    collection_id INTEGER NOT NULL,
    rkey          TEXT    NOT NULL,
    rev           TEXT    NOT NULL,
    deleted_us    INTEGER NOT NULL,
    PRIMARY KEY (actor_id, collection_id, rkey)
) WITHOUT ROWID;

-- Per-viewer feeds. The primary key is the page order, so a page is one
-- index range read; the second index makes a record delete reach every
-- feed holding it without scanning the table.
CREATE TABLE feed_items (
    viewer_id INTEGER NOT NULL,
    target_id INTEGER NOT NULL,
    sort_us   INTEGER NOT NULL,
    record_id INTEGER NOT NULL,
    PRIMARY KEY (viewer_id, target_id, sort_us, record_id)
) WITHOUT ROWID;

CREATE INDEX feed_items_by_record ON feed_items (record_id);

-- Stream positions, one row per kind. Written in the same transaction as
-- the rows they cover.
CREATE TABLE cursors (
    kind       TEXT    PRIMARY KEY,
    scope      TEXT    NOT NULL DEFAULT '',
    time_us    INTEGER NOT NULL DEFAULT 0,
    seq        INTEGER NOT NULL DEFAULT 0,
    host       TEXT    NOT NULL DEFAULT '',
    generation INTEGER NOT NULL DEFAULT 0,
    updated_us INTEGER NOT NULL DEFAULT 0
);
