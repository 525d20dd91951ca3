-- The stream time of the last account event applied to an actor. Account
-- events carry no revision, and the reconnect rewind replays them: an old
-- deactivation replayed after the reactivation that followed it would hide
-- the author again, and the reactivation's merge would bring back only its
-- newest posts. An event no newer than this one is a duplicate.
ALTER TABLE actors ADD COLUMN status_us INTEGER NOT NULL DEFAULT 0;
