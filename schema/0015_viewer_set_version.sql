-- How many transactions have added or retired viewers. The daemon keeps
-- every registered viewer in memory, to tell new viewers from existing
-- ones without a read (feeds/viewer_set.go); an operator command beside
-- it (appview backfill) registers viewers too, so the daemon reloads its
-- set when the version moves by other hands than its own.
CREATE TABLE viewer_set_version (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    version INTEGER NOT NULL
);

INSERT INTO viewer_set_version (one, version) VALUES (1, 0);
