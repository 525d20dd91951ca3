-- Every manual change an operator makes with `appview cursor reset`, for
-- `appview audit`: what, to which target, from what to what, when, by whom.
CREATE TABLE audit (
    id        INTEGER PRIMARY KEY,
    action    TEXT    NOT NULL,
    target    TEXT    NOT NULL,
    old_value TEXT    NOT NULL,
    new_value TEXT    NOT NULL,
    at_us     INTEGER NOT NULL,
    os_user   TEXT    NOT NULL
);

-- Gaps: the stored stream cursor was older than what Jetstream retains
-- when the daemon reconnected, so events in between were never seen.
CREATE TABLE gaps (
    id          INTEGER PRIMARY KEY,
    detected_us INTEGER NOT NULL,
    cursor_us   INTEGER NOT NULL,
    size_us     INTEGER NOT NULL
);
