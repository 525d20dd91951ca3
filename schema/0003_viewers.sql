-- Viewers are actors whose feed has been read, per feed. Outside index_all
-- mode they are the fan-out audience, and only their follow records (and
-- the target records of accounts they follow) are stored.
CREATE TABLE viewers (
    actor_id       INTEGER NOT NULL,
    feed           TEXT    NOT NULL,
    -- pending until the first-read backfill built the feed, then complete.
    state          TEXT    NOT NULL DEFAULT 'pending',
    -- A first read claims the row with a compare-and-swap on the owner and
    -- a lease, so concurrent reads (and a crashed run) resolve to one run.
    claim_owner    TEXT    NOT NULL DEFAULT '',
    claim_until_us INTEGER NOT NULL DEFAULT 0,
    attempts       INTEGER NOT NULL DEFAULT 0,
    last_error     TEXT    NOT NULL DEFAULT '',
    next_retry_us  INTEGER NOT NULL DEFAULT 0,
    registered_us  INTEGER NOT NULL,
    last_read_us   INTEGER NOT NULL,
    completed_us   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (actor_id, feed)
) WITHOUT ROWID;

CREATE INDEX viewers_by_last_read ON viewers (last_read_us);

-- One listing state per (account, collection) fetched from a PDS: a
-- viewer's follows, a followee's targets. The page cursor is stored with
-- the rows of its page; round restarts the listing from the top.
CREATE TABLE listings (
    actor_id      INTEGER NOT NULL,
    collection_id INTEGER NOT NULL,
    host          TEXT    NOT NULL DEFAULT '',
    round         INTEGER NOT NULL DEFAULT 0,
    page          INTEGER NOT NULL DEFAULT 0,
    cursor        TEXT    NOT NULL DEFAULT '',
    fetched       INTEGER NOT NULL DEFAULT 0,
    complete      INTEGER NOT NULL DEFAULT 0,
    -- gone: the repo does not exist or is deactivated; not retried in a loop.
    gone          INTEGER NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT    NOT NULL DEFAULT '',
    next_retry_us INTEGER NOT NULL DEFAULT 0,
    updated_us    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (actor_id, collection_id)
) WITHOUT ROWID;

-- What every backfill run did, for operators.
CREATE TABLE sync_runs (
    id          INTEGER PRIMARY KEY,
    kind        TEXT    NOT NULL,
    subject     TEXT    NOT NULL,
    collection  TEXT    NOT NULL,
    pages       INTEGER NOT NULL,
    written     INTEGER NOT NULL,
    skipped     INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,
    error       TEXT    NOT NULL,
    started_us  INTEGER NOT NULL,
    duration_us INTEGER NOT NULL
);

CREATE INDEX sync_runs_by_start ON sync_runs (started_us);
