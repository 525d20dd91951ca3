-- Feed rows are no longer indexed by record. Every feed row of a record is
-- held by a follower of its author (fan-out, merges and first-read builds
-- only ever write followers' rows, and unfollows remove them), so a record
-- delete reaches its rows through follows_by_subject and the primary key.
-- The index cost a random write per fan-out row and per pruned row, which
-- made a sweep slice on a 10M-row table several times slower than on a
-- small one (docs/prune.md).
DROP INDEX IF EXISTS feed_items_by_record;
